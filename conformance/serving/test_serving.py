"""The speech server (python -m reference.serve) driven over HTTP on loopback (issue #11).

One server per variant of conformance/cases/serving/server.yaml: the default profile on a CPU
(Model Runner V1 there); on CUDA the default profile (V2) and the V1 opt-out (`gpu` marker, tox -e
gpu). Checked: whole WAVs with exact headers, streamed WAV/PCM/SSE equal to the whole response
within the stream = offline bound, the audio-describing headers of every kind of answer, the
first chunk before the server takes the last row, a disconnect (after the first chunk, and in
the middle of a send) that aborts its engine request (proven by the metrics: our abort counter,
vLLM's gauges, the talker slots), long input up to the limit and one token over it, the bad-input
table, concurrent streams each equal to the request alone, and OpenAI's own client.

No check reads a clock: the disconnect checks hold a stream with a client that reads nothing
more (SlowReader), and wait (bounded) for what the server reports.
"""

import base64
import json
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import torch

from conformance import case_files
from conformance.talker import talker_cases
from conformance.environment import has_cuda
from conformance.serving.serving_client import (MODEL_NAME, ServerProcess, SlowReader, as_float, body_for,
                                                pcm_of_wav, wav_bytes, within)
from conformance.serving.encoded_audio import judge
from conformance.serving.stream_default import check_default_answer
from higgs_dummy.cache import cached_checkpoint
from reference.codec.delay_pattern import rows_to_frames
from reference.codec.model import load_codec
from reference.codec.wav_io import read_wav
from reference.serve.app import MEDIA_TYPES
from reference.serve.encode import FORMATS
from reference.serve.metrics import metric
from reference.serve.wav import HEADER_BYTES, pcm16
from reference.talker import prompts
from reference.talker.special_tokens import load_tokenizer, special_ids

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu]

DOC = case_files.load("serving/server")
BAD = case_files.load("serving/bad_input")
PROMPTS = {p["id"]: p for p in talker_cases.load_prompts()["prompts"]}
NARRATOR = {"seconds": 0.5, "seed": 7}  # the server's named voice "narrator": seeded noise
SPEECH = "/v1/audio/speech"


def _variant_marks(v):
    if v["platform"] == "cuda":
        return [pytest.mark.gpu]
    if has_cuda():
        return [pytest.mark.skip(reason="the CPU variant: on a CUDA machine the gpu_* variants run instead")]
    return []


VARIANTS = {v["id"]: v for v in DOC["variants"]}


@pytest.fixture(scope="module", params=[pytest.param(v["id"], marks=_variant_marks(v)) for v in DOC["variants"]])
def variant(request):
    return VARIANTS[request.param]


@pytest.fixture(scope="module")
def server(variant, tmp_path_factory):
    work = tmp_path_factory.mktemp(f"serve_{variant['id']}")
    voices = work / "voices"
    voices.mkdir()
    (voices / "narrator.wav").write_bytes(wav_bytes(talker_cases.reference_audio(NARRATOR)))
    (voices / "narrator.txt").write_text("The narrator's reference recording.")
    gpu = DOC["gpu_overrides"] if variant["platform"] == "cuda" else {}
    overrides = {**DOC["overrides"], **gpu, **variant["overrides"]}
    srv = ServerProcess(cached_checkpoint("tiny", 0), variant["profile"], variant["platform"], overrides, work, voices)
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def _whole(server, body) -> bytes:
    response = server.client.post(SPEECH, json={**body, "stream": False})
    assert response.status_code == 200, response.text
    return pcm_of_wav(response.content, streamed=False) if body.get("response_format", "wav") == "wav" else response.content


def _streamed(server, body) -> bytes:
    """The PCM of a streamed request (own connection: callable from threads)."""
    with httpx.Client(base_url=server.url, timeout=300.0) as client:
        with client.stream("POST", SPEECH, json={**body, "stream_format": "audio"}) as response:
            assert response.status_code == 200, response.read()
            data = b"".join(response.iter_bytes())
    return pcm_of_wav(data, streamed=True) if body.get("response_format", "wav") == "wav" else data


def _sse(server, body) -> bytes:
    with server.client.stream("POST", SPEECH, json={**body, "stream_format": "sse"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events[-1:]] == ["speech.audio.done"]
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
    return b"".join(base64.b64decode(e["audio"]) for e in events[:-1])


def test_health_models_and_metrics(server, variant):
    health = server.client.get("/health")
    assert health.status_code == 200 and health.json()["runner"] == variant["runner"]
    assert [m["id"] for m in server.client.get("/v1/models").json()["data"]] == [MODEL_NAME]
    values = server.metrics()
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "higgs_serve_requests_running", "higgs_serve_requests_waiting", "higgs_serve_requests_aborted_total",
                 "higgs_serve_talker_slots_in_use", "higgs_serve_ttfa_seconds_count", "higgs_serve_sends_waiting"):
        assert any(k == name or k.startswith(name + "{") for k in values), f"/metrics lacks {name}"


@pytest.mark.parametrize("case", case_files.params("serving/server", "requests"))
def test_streamed_audio_equals_the_whole_response(case, server, variant):
    body = body_for(PROMPTS[case["prompt"]], **({"voice": case["voice"]} if "voice" in case else {}))
    whole = _whole(server, body)  # exact WAV header checked by pcm_of_wav
    assert _whole(server, {**body, "response_format": "pcm"}) == whole
    within(variant["bound"], _streamed(server, body), whole)
    assert _sse(server, {**body, "response_format": "pcm"}) == _streamed(server, {**body, "response_format": "pcm"})


ABORTED = "higgs_serve_requests_aborted_total"
SETTLE_S = 60.0  # a bound on waiting for an event the server reports (generous: cores shared under load)


def _abort_body() -> dict:
    spec = DOC["abort"]
    return body_for(PROMPTS[spec["prompt"]], max_tokens=spec["max_tokens"], stream_format="audio")


def _speech_requests(v) -> float:
    return metric(v, "higgs_serve_requests_running") + metric(v, "higgs_serve_requests_waiting")


def _let_go_counted(server, before: dict, remaining: int = 0) -> dict:
    """Waits until the server lets go of a request whose client left (`remaining` speech requests
    left), then reads the abort counter at that same scrape. The server counts the abort before it
    lets go (the frame source aborts and counts, the feeder ends, the stage stream closes, then the
    request ends), so a request let go uncounted had its producer abandoned: counted later, when
    the garbage collector finalizes it, or never."""
    values = server.wait_for(lambda v: _speech_requests(v) == remaining, timeout=SETTLE_S,
                             what="the server did not let go of the request whose client left")
    assert metric(values, ABORTED) == metric(before, ABORTED) + 1, (
        "the request whose client left ended in the server without its abort counted (the stream had "
        "ended already, or its producer was left behind)")
    return values


def _settled(before: dict):
    """One abort more than `before`, and nothing left: no engine request running or waiting, no KV
    block, no talker slot, no speech request, no send waiting on a client."""
    def condition(v):
        return (metric(v, ABORTED) == metric(before, ABORTED) + 1
                and metric(v, "vllm:num_requests_running") == 0 and metric(v, "vllm:num_requests_waiting") == 0
                and metric(v, "vllm:kv_cache_usage_perc") == 0 and metric(v, "higgs_serve_talker_slots_in_use") == 0
                and _speech_requests(v) == 0 and metric(v, "higgs_serve_sends_waiting") == 0)
    return condition


def test_absent_stream_format_gets_the_profiles_default(server, variant):
    """OpenAI's client names no stream field by default; the variant's geometry decides (streamed
    where it stitches exactly, whole where it is lossy), and the answer says which and why."""
    check_default_answer(server, body_for(PROMPTS["fox"]), variant["stream_default"], variant["bound"])


def test_first_chunk_arrives_before_the_server_takes_the_last_row(server):
    """Streamed, not gathered: the first chunk reaches a client that then reads nothing more, so
    the rest of the answer waits on it (SlowReader); when it leaves, the server aborts a request
    whose rows it had not all taken, and counts it. A server that gathers the answer first has
    taken every row before the first chunk: nothing is left to abort. No clock: how far the
    engine had got at the first chunk is printed, not checked (under load the engine can finish
    before the codec's first chunk, which is no fault of the stream)."""
    before = server.metrics()
    with SlowReader(server.url, _abort_body()) as reader:
        assert reader.status == 200, reader.status
        data = reader.read_body(HEADER_BYTES + 1)
        at_first_chunk = server.metrics()
    _let_go_counted(server, before)
    server.wait_for(_settled(before), timeout=SETTLE_S, what="the aborted request left something held")
    rows = metric(at_first_chunk, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    print(f"at the first chunk the engine had generated {rows:.0f} of {DOC['abort']['max_tokens']} rows")
    assert len(pcm_of_wav(data, streamed=True)) > 0


def test_disconnect_aborts_the_request_and_spares_the_others(server, variant):
    """A stream held by its reader (its send waiting: it cannot end unread) and a second one whose
    client leaves at its first chunk. The server lets go of the second only with its abort
    counted, and the held stream, read to its end afterwards, is the same request alone (within
    the variant's bound for streams among others: the codec stage batches their chunks)."""
    body = _abort_body()
    start = server.value("vllm:generation_tokens_total")
    alone = _streamed(server, body)
    rows_alone = server.value("vllm:generation_tokens_total") - start
    before = server.metrics()
    with SlowReader(server.url, body) as survivor:
        survivor.read_body(HEADER_BYTES + 1)
        server.wait_for(lambda v: metric(v, "higgs_serve_sends_waiting") == 1, timeout=SETTLE_S,
                        what="the first stream was not held by its reader")
        with SlowReader(server.url, body) as leaving:
            leaving.read_body(HEADER_BYTES + 1)
        # Leaving the block closed that connection with the rest of its answer waiting on it.
        _let_go_counted(server, before, remaining=1)
        kept = pcm_of_wav(survivor.read_rest(), streamed=True)
    if "concurrent_bound" in variant:
        within(variant["concurrent_bound"], kept, alone)
    else:
        assert kept == alone, "a stream changed when another was aborted"
    after = server.wait_for(_settled(before), timeout=SETTLE_S, what="the aborted request left something held")
    rows = metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total") - rows_alone
    print(f"the aborted request ran {rows:.0f} of {rows_alone:.0f} rows (printed, not checked)")


def test_client_leaving_mid_send_aborts_and_frees_everything(server):
    """The race the checks above leave to chance: the client goes while the server is in the
    middle of a send. The reader takes the first chunk and no more until the server reports its
    send waiting on it (higgs_serve_sends_waiting 1: the socket and the transport's buffer are
    full, the stage's producer waits behind them), then leaves. The response must still end its
    body and stage stream: the abort counted before the request is let go, the engine request,
    KV blocks and talker slot gone, no send left waiting."""
    before = server.metrics()
    with SlowReader(server.url, _abort_body()) as reader:
        reader.read_body(HEADER_BYTES + 1)
        server.wait_for(lambda v: metric(v, "higgs_serve_sends_waiting") == 1, timeout=SETTLE_S,
                        what="the server's send never waited on the reader (did its buffers take the whole answer?)")
    _let_go_counted(server, before)
    server.wait_for(_settled(before), timeout=SETTLE_S, what="the aborted request left something held")


def test_sse_wav_carries_a_24khz_mono_16bit_header(server):
    body = body_for(PROMPTS["fox"])
    pcm = pcm_of_wav(_sse(server, {**body, "response_format": "wav"}), streamed=True)  # rate, channels, bits
    assert pcm == _streamed(server, {**body, "response_format": "pcm"})


@pytest.mark.parametrize("case", case_files.params("serving/server", "answer_headers"))
def test_answer_headers_describe_24khz_audio(case, server):
    names = {n for c in DOC["answer_headers"] for n in c["headers"]}
    body = body_for(PROMPTS["hello"], **case["body"])
    with server.client.stream("POST", SPEECH, json=body) as response:
        assert response.status_code == 200, response.read()
        got = {n: response.headers.get(n) for n in names}
        response.read()
    assert got == {n: case["headers"].get(n) for n in names}


def _text_of_tokens(tokenizer, n: int) -> str:
    """The longest prefix of the long_text prompt, repeated, that is at most n tokens (exactly n)."""
    source = " ".join([PROMPTS["long_text"]["text"]] * (n // 8 + 1))
    count = lambda k: len(tokenizer.encode(source[:k], add_special_tokens=False))  # noqa: E731
    lo, hi = 1, len(source)
    while lo < hi:  # the largest prefix length whose token count is <= n
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if count(mid) <= n else (lo, mid - 1)
    assert count(lo) == n, f"no prefix of exactly {n} tokens"
    return source[:lo]


def test_long_input_streams_to_its_end_and_one_token_more_is_refused(server, variant):
    max_tokens = DOC["long_input"]["max_tokens"]
    tokenizer = load_tokenizer(cached_checkpoint("tiny", 0))
    too_long = server.client.post(SPEECH, json=body_for({"text": "a" * 5000}, max_tokens=max_tokens))
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "input", too_long.text
    limit = int(re.search(r"over the limit of (\d+) tokens", too_long.json()["error"]["message"]).group(1))
    assert "max_model_len 1024" in too_long.json()["error"]["message"]
    body = body_for({"text": _text_of_tokens(tokenizer, limit)}, max_tokens=max_tokens)
    within(variant["bound"], _streamed(server, body), _whole(server, body))
    over = server.client.post(SPEECH, json=body_for({"text": _text_of_tokens(tokenizer, limit + 1)}, max_tokens=max_tokens))
    assert over.status_code == 400, over.text
    assert over.json()["error"]["param"] == "input" and f"limit of {limit} tokens" in over.json()["error"]["message"]


def _bad_request(case) -> bytes:
    if "raw" in case:
        return case["raw"].encode()
    if "raw_size" in case:
        return b" " * case["raw_size"]
    body = {"model": MODEL_NAME, **BAD["base"], **case.get("body", {})}
    for name in case.get("remove", []):
        body.pop(name)
    ref = case.get("ref_audio")
    if ref is not None:
        if "wav_seconds" in ref:
            noise = talker_cases.reference_audio({"seconds": ref["wav_seconds"], "seed": 9})
            data = wav_bytes(noise)[: ref.get("truncate_to")]
        else:
            data = ref["bytes_of_text"].encode()
        body["ref_audio"] = base64.b64encode(data).decode()
    return json.dumps(body).encode()


@pytest.mark.parametrize("case", case_files.params("serving/bad_input"))
def test_bad_input_is_a_client_error_naming_the_field(case, server, variant):
    response = server.client.post(SPEECH, content=_bad_request(case), headers={"content-type": "application/json"})
    expect = case["expect"]
    assert response.status_code == expect["status"], response.text
    error = response.json()["error"]
    assert error["param"] == expect["param"], error
    pattern = expect.get("message") or expect["message_by_runner"][variant["runner"]]
    assert re.search(pattern, error["message"]), error["message"]
    assert server.client.get("/health").status_code == 200


def test_concurrent_streams_each_equal_the_request_alone(server, variant):
    prompts = DOC["concurrent_prompts"]
    bodies = [body_for(PROMPTS[prompts[i % len(prompts)]]) for i in range(variant["concurrency"])]
    alone = {b["input"]: _streamed(server, b) for b in bodies}
    with ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda b: _streamed(server, b), bodies))
    for body, pcm in zip(bodies, together):
        if "concurrent_bound" in variant:
            within(variant["concurrent_bound"], pcm, alone[body["input"]])
        else:
            assert pcm == alone[body["input"]], f"{body['input']!r} differs when {len(bodies)} streams run at once"
    server.wait_for(lambda v: metric(v, "higgs_serve_talker_slots_in_use") == 0 and metric(v, "vllm:num_requests_running") == 0)


def test_openai_client_streams_a_wav_the_offline_decode_matches(server, variant, tmp_path):
    openai = pytest.importorskip("openai", reason="the openai package (installed with vLLM) is missing")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=300.0)
    prompt = PROMPTS["fox"]
    path = tmp_path / "fox.wav"
    with client.audio.speech.with_streaming_response.create(
        model=MODEL_NAME, voice="default", input=prompt["text"], response_format="wav", stream_format="audio",
        extra_body={"temperature": 0.0},
    ) as response:
        response.stream_to_file(path)
    pcm = pcm_of_wav(path.read_bytes(), streamed=True)
    samples, rate = read_wav(path)  # the stdlib reader takes the unknown-length header to the end
    assert rate == 24000 and len(samples) == len(pcm) // 2
    rows = talker_cases.load_goldens()["streams"]["fox"]["rows"]  # the oracle's greedy rows
    offline = load_codec(cached_checkpoint("tiny", 0)).decode(rows_to_frames(torch.tensor(rows)))
    within(variant["bound"], pcm, pcm16(offline))
    assert np.allclose(samples, as_float(pcm).numpy() * 32767 / 32768, atol=1e-6)


def test_openai_client_voice_object_sse_usage_and_pcm_headers(server, variant):
    """OpenAI's newer request and answer details through its own client: `voice` as `{"id": ...}`,
    SSE whose `speech.audio.done` carries `usage` (the prompt's tokens in, the talker's rows out,
    checked against the prompt layout and the oracle's greedy rows), and raw PCM that names its
    rate, channels and bits."""
    openai = pytest.importorskip("openai", reason="the openai package (installed with vLLM) is missing")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=300.0)
    text = PROMPTS["fox"]["text"]
    request = dict(model=MODEL_NAME, voice={"id": "default"}, input=text, response_format="pcm",
                   extra_body={"temperature": 0.0})
    with client.audio.speech.with_streaming_response.create(**request, stream_format="sse") as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events[-1:]] == ["speech.audio.done"], events[-1:]
    tokenizer = load_tokenizer(cached_checkpoint("tiny", 0))
    rows = talker_cases.load_goldens()["streams"]["fox"]["rows"]
    prompt = prompts.zero_shot(tokenizer, special_ids(tokenizer), text)
    assert events[-1]["usage"] == {"input_tokens": len(prompt.token_ids), "output_tokens": len(rows),
                                   "total_tokens": len(prompt.token_ids) + len(rows)}
    sse = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    with client.audio.speech.with_streaming_response.create(**request, stream_format="audio") as response:
        described = {n: response.headers.get(n) for n in ("x-sample-rate", "x-channels", "x-bit-depth")}
        streamed = response.read()
    assert described == {"x-sample-rate": "24000", "x-channels": "1", "x-bit-depth": "16"}
    assert sse == streamed == _streamed(server, body_for(PROMPTS["fox"], response_format="pcm"))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_compressed_answers_decode_to_the_pcm_answer(fmt, server):
    """Whole, streamed and SSE, each decoded by a decoder other than its encoder and judged against
    the PCM answer of the same kind (encoded_audio.py; bounds: `formats` in server.yaml)."""
    pcm, body = body_for(PROMPTS["fox"], response_format="pcm"), body_for(PROMPTS["fox"], response_format=fmt)
    whole_pcm, streamed_pcm = _whole(server, pcm), _streamed(server, pcm)
    whole = server.client.post(SPEECH, json={**body, "stream": False})
    assert whole.status_code == 200 and whole.headers["content-type"] == MEDIA_TYPES[fmt], whole.headers
    with server.client.stream("POST", SPEECH, json={**body, "stream_format": "audio"}) as response:
        assert response.status_code == 200 and response.headers["content-type"] == MEDIA_TYPES[fmt]
        streamed = response.read()
    answers = {"whole": (whole.content, whole_pcm, False), "streamed": (streamed, streamed_pcm, True),
               "sse": (_sse(server, body), streamed_pcm, True)}
    for name, (data, reference, is_streamed) in answers.items():
        print(f"{fmt} {name}: {judge(fmt, data, reference, is_streamed, DOC['formats'][fmt])}")


def test_no_request_was_answered_500(server):
    values = server.metrics()
    assert values.get('higgs_serve_requests_total{status="500"}', 0.0) == 0, server.log_tail()
    assert server.client.get("/health").status_code == 200
