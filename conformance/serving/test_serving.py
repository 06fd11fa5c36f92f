"""A speech server driven over HTTP (issues #11 and #32).

By default ours (python -m reference.serve) on loopback, one server per variant of
conformance/cases/serving/server.yaml: the default profile on a CPU (Model Runner V1 there); on
CUDA the default profile (V2) and the V1 opt-out (`gpu` marker, tox -e gpu). With `--server-url URL`
(and `--implementation NAME`) the server at that URL, judged through its adapter
(conformance/serving/implementations.py): the checks marked `reference_only` skip with their reason,
and a check `needs` features the adapter may lack ("not applicable: ..."). Checked: whole WAVs with
exact headers, streamed WAV/PCM/SSE equal to the whole response
within the stream = offline bound, the audio-describing headers of every kind of answer, the
first chunk before the server takes the last row, a disconnect (after the first chunk, and in
the middle of a send) that aborts its engine request (proven by the metrics: our abort counter,
vLLM's gauges, the talker slots), long input up to the limit and one token over it, the bad-input
table, concurrent streams each equal to the request alone, `speed`, a voice uploaded and deleted, and OpenAI's
own client.

No check reads a clock: the disconnect checks hold a stream with a client that reads nothing
more (SlowReader), and wait (bounded) for what the server reports.
"""

import base64
import http.client
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
import torch

from conformance import case_files
from conformance.talker import talker_cases
from conformance.environment import has_cuda
from conformance.serving import implementations
from conformance.serving.serving_client import (MODEL_NAME, RemoteServer, ServerProcess, SlowReader, as_float,
                                                pcm_of_wav, wav_bytes, within, write_voices)
from conformance.serving.encoded_audio import judge
from conformance.serving.stream_default import check_default_answer
from higgs_dummy.cache import cached_checkpoint
from reference.codec.delay_pattern import rows_to_frames
from reference.codec.model import load_codec
from reference.codec.wav_io import read_wav
from reference.serve.answers import MEDIA_TYPES
from reference.serve.encode import FORMATS
from reference.serve.metrics import metric
from reference.serve.wav import HEADER_BYTES, pcm16
from reference.talker import prompts
from reference.talker.special_tokens import load_tokenizer, special_ids

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu]

DOC = case_files.load("serving/server")
BAD = case_files.load("serving/bad_input")
PROMPTS = {p["id"]: p for p in talker_cases.load_prompts()["prompts"]}
SPEECH = "/v1/audio/speech"
SELECTION = implementations.selection()  # the implementation under test (conftest.py: --implementation, --server-url)
IMPL = SELECTION.implementation
needs = pytest.mark.needs
reference_only = pytest.mark.reference_only
# The bad requests any OpenAI-compatible speech server refuses; the rest of the table is our policy.
OPENAI_CASES = set(BAD["openai_cases"])
assert OPENAI_CASES <= {c["id"] for c in BAD["cases"]}, OPENAI_CASES - {c["id"] for c in BAD["cases"]}


def _variant_marks(v):
    if v["platform"] == "cuda":
        return [pytest.mark.gpu]
    if has_cuda():
        return [pytest.mark.skip(reason="the CPU variant: on a CUDA machine the gpu_* variants run instead")]
    return []


VARIANTS = {v["id"]: v for v in DOC["variants"]}


def _variant_params():
    """Our server per variant; one parameter named after the implementation when the server is at a URL."""
    if SELECTION.remote:
        return [pytest.param(IMPL.name)]
    return [pytest.param(v["id"], marks=_variant_marks(v)) for v in DOC["variants"]]


@pytest.fixture(scope="module", params=_variant_params())
def variant(request):
    return IMPL.variant() if SELECTION.remote else VARIANTS[request.param]


@pytest.fixture(scope="module")
def server(variant, tmp_path_factory):
    if SELECTION.remote:
        # the answer length our servers default to (server.yaml), sent where a check names none (caps_length)
        srv = RemoteServer(SELECTION.url, IMPL, DOC["overrides"]["stages.0.default_sampling_params.max_tokens"])
        srv.at_start = srv.metrics() if IMPL.metrics else {}
        yield srv
        srv.stop()
        return
    work = tmp_path_factory.mktemp(f"serve_{variant['id']}")
    voices = work / "voices"
    write_voices(voices)
    gpu = DOC["gpu_overrides"] if variant["platform"] == "cuda" else {}
    overrides = {**DOC["overrides"], **gpu, **variant["overrides"]}
    srv = ServerProcess(cached_checkpoint("tiny", 0), variant["profile"], variant["platform"], overrides, work, voices)
    try:
        srv.wait_healthy()
        srv.at_start = {}
        yield srv
    finally:
        srv.stop()


def _shown(response) -> str:
    """An answer for an assertion's message: its status and JSON or text, or its content type and length (audio)."""
    kind = response.headers.get("content-type", "")
    if kind.startswith(("application/json", "text/")):
        return f"{response.status_code}: {response.text[:500]}"
    return f"{response.status_code}: {kind or 'no content type'}, {len(response.content)} bytes"


def _whole(server, body) -> bytes:
    response = server.client.post(SPEECH, json={**body, "stream": False})
    assert response.status_code == 200, response.text
    return pcm_of_wav(response.content, streamed=False) if body.get("response_format", "wav") == "wav" else response.content


def _streamable(body) -> dict:
    """`body` in a format the implementation streams: its own, else pcm (sglang-omni streams pcm only)."""
    fmt = body.get("response_format", "wav")
    return body if IMPL.format_reason(fmt, streamed=True) is None else {**body, "response_format": "pcm"}


def _streamed(server, body) -> bytes:
    """The PCM of a streamed request (own connection: callable from threads), in the body's format where the
    implementation streams it, else as pcm (_streamable)."""
    body = _streamable(body)
    with httpx.Client(base_url=server.url, timeout=300.0) as client:
        with client.stream("POST", SPEECH, json=IMPL.streamed(body, "audio")) as response:
            assert response.status_code == 200, response.read()
            data = b"".join(response.iter_bytes())
    return pcm_of_wav(data, streamed=True) if body.get("response_format", "wav") == "wav" else data


def _sse(server, body) -> bytes:
    with server.client.stream("POST", SPEECH, json=IMPL.streamed(body, "sse")) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events[-1:]] == ["speech.audio.done"]
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
    return b"".join(base64.b64decode(e["audio"]) for e in events[:-1])


@reference_only(reason="the runner in /health and the served name higgs-tiny are our server's (reference/serve/app.py)")
def test_health_names_the_runner_and_models_the_served_name(server, variant):
    health = server.client.get("/health")
    assert health.status_code == 200 and health.json()["runner"] == variant["runner"]
    assert [m["id"] for m in server.client.get("/v1/models").json()["data"]] == [MODEL_NAME]


def test_models_list_the_model_the_requests_name(server):
    listed = server.client.get("/v1/models")
    assert listed.status_code == 200, listed.text
    assert server.model in [m["id"] for m in listed.json()["data"]], listed.json()


@needs("health")
def test_health_answers_200(server):
    assert server.client.get("/health").status_code == 200


@needs("metrics")
def test_metrics_carry_the_names_the_implementation_claims(server):
    """Each name with a series or declared by a `# TYPE` line: a labelled counter has no series before its
    first increment (serving_client.metric_names)."""
    carried = server.metric_names()
    missing = [name for name in IMPL.metrics.names if name not in carried]
    assert not missing, f"/metrics lacks {', '.join(missing)}"


def test_an_idle_connection_outlives_a_clients_keep_alive(server):
    """A client's pool reuses a connection that has been idle for up to its keep-alive (httpx: 5 s). A
    server that closes idle connections no later than that races the request sent on one: it is reset
    (the client's ReadError) before the server reads it. The connection must still serve after that
    idle time, on the same socket."""
    idle_s = httpx.Limits().keepalive_expiry + 1
    url = httpx.URL(server.url)
    connection = http.client.HTTPConnection(url.host, url.port, timeout=30)
    try:
        connection.request("GET", "/v1/models")
        first = connection.getresponse()
        first.read()
        assert first.status == 200
        socket_name = connection.sock.getsockname()
        time.sleep(idle_s)
        try:
            connection.request("GET", "/v1/models")
            second = connection.getresponse()
            second.read()
        except (http.client.HTTPException, ConnectionError) as exc:
            pytest.fail(f"the server closed a connection idle for {idle_s:g} s: the next request on it failed ({exc!r})")
        assert second.status == 200 and connection.sock.getsockname() == socket_name
    finally:
        connection.close()


def _still_serving(server) -> None:
    """/health answers 200 where the implementation has it, else /v1/models does."""
    path = "/v1/models" if IMPL.not_applicable("health") else "/health"
    assert server.client.get(path).status_code == 200, f"{path} does not answer 200 any more"


def _not_applicable(reason: str | None) -> list:
    """A case's marks: a skip with its reason where the implementation under test cannot take it."""
    return [pytest.mark.skip(reason=reason)] if reason else []


def _not_applicable_if(reason: str | None):
    """A check's decorator: skipped with `reason` where the implementation under test cannot take it."""
    return pytest.mark.skip(reason=reason) if reason else (lambda check: check)


# Why the implementation streams no WAV, or None (sglang-omni streams raw PCM only).
NO_STREAMED_WAV = IMPL.format_reason("wav", streamed=True)


def _request_marks(case) -> list:
    prompt = PROMPTS[case["prompt"]]
    return _not_applicable(IMPL.not_applicable(*["ref_audio"] * bool(prompt.get("ref_audio")),
                                                *["named_voice"] * ("voice" in case)))


@needs("repeatable", "sse")
@pytest.mark.parametrize("case", case_files.params("serving/server", "requests", marks=_request_marks))
def test_streamed_audio_equals_the_whole_response(case, server, variant, record_property):
    """A reference WAV shorter or longer than the implementation accepts is drawn again, from its seed, at the
    nearest bound it accepts (Implementation.fit_ref_audio), and the results say so: the check judges the
    stream against the whole answer, not the reference's length."""
    prompt = PROMPTS[case["prompt"]]
    if prompt.get("ref_audio") and (fitted := IMPL.fit_ref_audio(prompt["ref_audio"])) != prompt["ref_audio"]:
        record_property("note", f"reference audio of {fitted['seconds']:g} s instead of the prompt's "
                                f"{prompt['ref_audio']['seconds']:g} s: {IMPL.name} accepts "
                                f"{IMPL.ref_audio_seconds[0]:g} s to {IMPL.ref_audio_seconds[1]:g} s")
    body = server.body(prompt, **({"voice": case["voice"]} if "voice" in case else {}))
    whole = _whole(server, body)  # exact WAV header checked by pcm_of_wav
    assert _whole(server, {**body, "response_format": "pcm"}) == whole
    if NO_STREAMED_WAV:
        record_property("note", f"streamed as pcm: {NO_STREAMED_WAV}")
    within(variant["bound"], _streamed(server, body), whole)
    assert _sse(server, {**body, "response_format": "pcm"}) == _streamed(server, {**body, "response_format": "pcm"})


SETTLE_S = 60.0  # a bound on waiting for an event the server reports (generous: cores shared under load)


def _abort_body(server) -> dict:
    spec = DOC["abort"]
    return IMPL.streamed(server.body(PROMPTS[spec["prompt"]], max_tokens=spec["max_tokens"]), "audio")


def _speech_requests(v) -> float:
    """The speech requests the server holds (ours: higgs_serve_requests_running + _waiting)."""
    return sum(metric(v, name) for name in IMPL.metrics.in_flight)


def _aborted(v) -> float:
    """Requests aborted because their client left (ours: higgs_serve_requests_aborted_total)."""
    return IMPL.metrics.aborted(v)


def _let_go_counted(server, before: dict, remaining: int = 0) -> dict:
    """Waits until the server lets go of a request whose client left (`remaining` speech requests
    left), then reads the abort counter at that same scrape. The server counts the abort before it
    lets go (the frame source aborts and counts, the feeder ends, the stage stream closes, then the
    request ends), so a request let go uncounted had its producer abandoned: counted later, when
    the garbage collector finalizes it, or never."""
    values = server.wait_for(lambda v: _speech_requests(v) == remaining, timeout=SETTLE_S,
                             what="the server did not let go of the request whose client left")
    assert _aborted(values) == _aborted(before) + 1, (
        "the request whose client left ended in the server without its abort counted (the stream had "
        "ended already, or its producer was left behind)")
    return values


def _settled(before: dict):
    """One abort more than `before`, and nothing left: every idle gauge of the implementation 0 (ours: no
    engine request running or waiting, no KV block, no talker slot, no speech request, no send waiting on
    a client)."""
    def condition(v):
        return _aborted(v) == _aborted(before) + 1 and all(metric(v, name) == 0 for name in IMPL.metrics.idle)
    return condition


@reference_only(reason="the default without stream_format is our profile's geometry decision, named in "
                        "X-Stream-Format-Default and /health and counted by higgs_serve_ttfa_seconds "
                        "(reference/serve/protocol.py StreamDefault)")
def test_absent_stream_format_gets_the_profiles_default(server, variant):
    """OpenAI's client names no stream field by default; the variant's geometry decides (streamed
    where it stitches exactly, whole where it is lossy), and the answer says which and why."""
    check_default_answer(server, server.body(PROMPTS["fox"]), variant["stream_default"], variant["bound"])


@needs("abort_metric")
def test_first_chunk_arrives_before_the_server_takes_the_last_row(server):
    """Streamed, not gathered: the first chunk reaches a client that then reads nothing more, so
    the rest of the answer waits on it (SlowReader); when it leaves, the server aborts a request
    whose rows it had not all taken, and counts it. A server that gathers the answer first has
    taken every row before the first chunk: nothing is left to abort. No clock: how far the
    engine had got at the first chunk is printed, not checked (under load the engine can finish
    before the codec's first chunk, which is no fault of the stream)."""
    before = server.metrics()
    with SlowReader(server.url, _abort_body(server)) as reader:
        assert reader.status == 200, reader.status
        data = reader.read_body(HEADER_BYTES + 1)
        at_first_chunk = server.metrics()
    _let_go_counted(server, before)
    server.wait_for(_settled(before), timeout=SETTLE_S, what="the aborted request left something held")
    rows = metric(at_first_chunk, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    print(f"at the first chunk the engine had generated {rows:.0f} of {DOC['abort']['max_tokens']} rows")
    assert len(pcm_of_wav(data, streamed=True)) > 0


@needs("abort_metric", "sends_waiting", "repeatable")
def test_disconnect_aborts_the_request_and_spares_the_others(server, variant):
    """A stream held by its reader (its send waiting: it cannot end unread) and a second one whose
    client leaves at its first chunk. The server lets go of the second only with its abort
    counted, and the held stream, read to its end afterwards, is the same request alone (within
    the variant's bound for streams among others: the codec stage batches their chunks)."""
    body = _abort_body(server)
    start = server.value("vllm:generation_tokens_total")
    alone = _streamed(server, body)
    rows_alone = server.value("vllm:generation_tokens_total") - start
    before = server.metrics()
    with SlowReader(server.url, body) as survivor:
        survivor.read_body(HEADER_BYTES + 1)
        server.wait_for(lambda v: metric(v, IMPL.metrics.sends_waiting) == 1, timeout=SETTLE_S,
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


@needs("abort_metric", "sends_waiting")
def test_client_leaving_mid_send_aborts_and_frees_everything(server):
    """The race the checks above leave to chance: the client goes while the server is in the
    middle of a send. The reader takes the first chunk and no more until the server reports its
    send waiting on it (higgs_serve_sends_waiting 1: the socket and the transport's buffer are
    full, the stage's producer waits behind them), then leaves. The response must still end its
    body and stage stream: the abort counted before the request is let go, the engine request,
    KV blocks and talker slot gone, no send left waiting."""
    before = server.metrics()
    with SlowReader(server.url, _abort_body(server)) as reader:
        reader.read_body(HEADER_BYTES + 1)
        server.wait_for(lambda v: metric(v, IMPL.metrics.sends_waiting) == 1, timeout=SETTLE_S,
                        what="the server's send never waited on the reader (did its buffers take the whole answer?)")
    _let_go_counted(server, before)
    server.wait_for(_settled(before), timeout=SETTLE_S, what="the aborted request left something held")


@needs("sse", "repeatable")
@_not_applicable_if(NO_STREAMED_WAV)
def test_sse_wav_carries_a_24khz_mono_16bit_header(server):
    body = server.body(PROMPTS["fox"])
    pcm = pcm_of_wav(_sse(server, {**body, "response_format": "wav"}), streamed=True)  # rate, channels, bits
    assert pcm == _streamed(server, {**body, "response_format": "pcm"})


def _header_marks(case) -> list:
    stream_format = case["body"].get("stream_format")
    return _not_applicable((IMPL.not_applicable("sse") if stream_format == "sse" else None)
                           or IMPL.format_reason(case["body"]["response_format"], streamed=stream_format is not None))


@pytest.mark.parametrize("case", case_files.params("serving/server", "answer_headers", marks=_header_marks))
def test_answer_headers_describe_24khz_audio(case, server):
    """The headers the implementation describes audio with (ours: Content-Type and X-Sample-Rate,
    X-Channels, X-Bit-Depth; others: Content-Type), each present or absent as the case says."""
    names = {n for c in DOC["answer_headers"] for n in c["headers"] if n in IMPL.described_by}
    body = server.body(PROMPTS["hello"], **case["body"])
    if "stream_format" in body:
        body = IMPL.streamed(body, body["stream_format"])
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


@reference_only(reason="the limit is the tiny checkpoint's max_model_len 1024 counted with its tokenizer, and the "
                        "message's wording is ours (reference/serve/protocol.py)")
def test_long_input_streams_to_its_end_and_one_token_more_is_refused(server, variant):
    max_tokens = DOC["long_input"]["max_tokens"]
    tokenizer = load_tokenizer(cached_checkpoint("tiny", 0))
    too_long = server.client.post(SPEECH, json=server.body({"text": "a" * 5000}, max_tokens=max_tokens))
    assert too_long.status_code == 400 and too_long.json()["error"]["param"] == "input", too_long.text
    limit = int(re.search(r"over the limit of (\d+) tokens", too_long.json()["error"]["message"]).group(1))
    assert "max_model_len 1024" in too_long.json()["error"]["message"]
    body = server.body({"text": _text_of_tokens(tokenizer, limit)}, max_tokens=max_tokens)
    within(variant["bound"], _streamed(server, body), _whole(server, body))
    over = server.client.post(SPEECH, json=server.body({"text": _text_of_tokens(tokenizer, limit + 1)},
                                                       max_tokens=max_tokens))
    assert over.status_code == 400, over.text
    assert over.json()["error"]["param"] == "input" and f"limit of {limit} tokens" in over.json()["error"]["message"]


def _bad_request(case, server) -> bytes:
    if "raw" in case:
        return case["raw"].encode()
    if "raw_size" in case:
        return b" " * case["raw_size"]
    body = server.implementation.spell({"model": server.model, **BAD["base"], **case.get("body", {})})
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


def _bad_input_marks(case) -> list:
    ours = IMPL is not implementations.REFERENCE and case["id"] not in OPENAI_CASES
    return _not_applicable(f"not applicable to {IMPL.name}: a case of our policy, not of OpenAI's API (the "
                           f"OpenAI cases are bad_input.yaml's openai_cases)" if ours else None)


@pytest.mark.parametrize("case", case_files.params("serving/bad_input", marks=_bad_input_marks))
def test_bad_input_is_a_client_error_naming_the_field(case, server, variant):
    """Ours: the table's status, error.param and message. Another implementation: the OpenAI cases
    (`openai_cases` in bad_input.yaml) each a 4xx whose error names the field where its adapter puts it
    (error.param, or the message); the rest of the table is our policy, not applicable there."""
    response = server.client.post(SPEECH, content=_bad_request(case, server),
                                  headers={"content-type": "application/json"})
    expect = case["expect"]
    if IMPL is implementations.REFERENCE:
        assert response.status_code == expect["status"], response.text
        error = response.json()["error"]
        assert error["param"] == expect["param"], error
        runner = variant["runner"] or server.client.get("/health").json()["runner"]
        pattern = expect.get("message") or expect["message_by_runner"][runner]
        assert re.search(pattern, error["message"]), error["message"]
    else:
        assert 400 <= response.status_code < 500, _shown(response)
        error = response.json()["error"]
        assert IMPL.names_field(error, expect["param"]), f"the error does not name {expect['param']!r}: {error}"
    _still_serving(server)


# Far past any talker's max_model_len (the tiny checkpoint's 1024, upstream's 8192 in
# deploy/higgs_multimodal_qwen3.yaml), and under our 8 MiB body limit.
PAST_ANY_LENGTH = 400_000


def test_an_input_past_any_model_length_is_a_client_error_naming_input(server):
    """Long input: refused with a 4xx naming `input` (never a 500, never audio cut short), and the
    server serves on."""
    text = (PROMPTS["long_text"]["text"] + " ") * (PAST_ANY_LENGTH // (len(PROMPTS["long_text"]["text"]) + 1) + 1)
    response = server.client.post(SPEECH, json=server.body({"text": text[:PAST_ANY_LENGTH]}, stream=False))
    assert 400 <= response.status_code < 500, _shown(response)
    assert IMPL.names_field(response.json()["error"], "input"), response.text[:500]
    _still_serving(server)


@needs("repeatable")
def test_concurrent_streams_each_equal_the_request_alone(server, variant):
    prompts = DOC["concurrent_prompts"]
    bodies = [server.body(PROMPTS[prompts[i % len(prompts)]]) for i in range(variant["concurrency"])]
    alone = {b["input"]: _streamed(server, b) for b in bodies}
    with ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda b: _streamed(server, b), bodies))
    for body, pcm in zip(bodies, together):
        if "concurrent_bound" in variant:
            within(variant["concurrent_bound"], pcm, alone[body["input"]])
        else:
            assert pcm == alone[body["input"]], f"{body['input']!r} differs when {len(bodies)} streams run at once"
    if IMPL.metrics is not None:
        server.wait_for(lambda v: all(metric(v, name) == 0 for name in IMPL.metrics.idle),
                        what="something was left held after the streams ended")


@needs("repeatable")
def test_speed_scales_the_duration_and_changes_no_sample_at_one(server):
    """`speed` (OpenAI's 0.25 to 4.0) on the engine's answer: at 1.0 the plain answer, sample for sample; at 2.0 and
    0.5 an answer 1/speed as long, within 2 % (a tone's pitch and the stream against the whole answer:
    tests/test_serve_tempo.py)."""
    body = server.body(PROMPTS["fox"], response_format="pcm")
    plain = _whole(server, body)
    assert _whole(server, {**body, "speed": 1.0}) == plain
    for speed in (2.0, 0.5):
        assert len(_whole(server, {**body, "speed": speed})) / len(plain) == pytest.approx(1 / speed, rel=0.02), speed


@reference_only(reason="uploads through our form (audio_sample, name, ref_text); upstream's also asks for `consent` "
                       "(entrypoints/openai/api_server.py:1568-1575) and encodes with a tokenizer the suite does not ship "
                       "(docs/implementations.md)")
def test_an_uploaded_voice_speaks_as_its_reference_sent_inline_and_is_gone_once_deleted(server):
    """A voice uploaded once (`POST /v1/audio/voices`) is listed, answers by name what the same reference and
    transcript sent in the request answer, and once deleted is no longer listed nor spoken (the hostile uploads,
    restarts and concurrency: tests/test_serve_voices.py)."""
    prompt = PROMPTS["clone_from_audio"]
    reference = wav_bytes(talker_cases.reference_audio(prompt["ref_audio"]))
    uploaded = server.client.post("/v1/audio/voices", files={"audio_sample": ("reference.wav", reference, "audio/wav")},
                                  data={"name": "uploaded", "ref_text": prompt["ref_text"]})
    assert uploaded.status_code == 200, uploaded.text
    try:
        assert "uploaded" in server.client.get("/v1/audio/voices").json()["voices"]
        by_name = _whole(server, server.body({"text": prompt["text"]}, voice="uploaded", response_format="pcm"))
        assert by_name == _whole(server, server.body(prompt, response_format="pcm"))
    finally:
        deleted = server.client.delete("/v1/audio/voices/uploaded")
    assert deleted.status_code == 200, deleted.text
    assert "uploaded" not in server.client.get("/v1/audio/voices").json()["voices"]
    gone = server.client.post(SPEECH, json=server.body({"text": prompt["text"]}, voice="uploaded"))
    assert gone.status_code == 400 and gone.json()["error"]["param"] == "voice", _shown(gone)


@_not_applicable_if(NO_STREAMED_WAV)
def test_openai_client_streams_a_wav_that_wave_reads(server, tmp_path):
    """OpenAI's own client, streaming a WAV to a file: an unknown-length 24 kHz mono 16-bit header
    that Python's wave module reads to the end."""
    openai = pytest.importorskip("openai", reason="the openai package (installed with vLLM) is missing")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=300.0)
    body = server.body(PROMPTS["fox"])
    path = tmp_path / "fox.wav"
    with client.audio.speech.with_streaming_response.create(
        model=body.pop("model"), voice=body.pop("voice"), input=body.pop("input"), response_format="wav",
        stream_format="audio", extra_body=body,
    ) as response:
        response.stream_to_file(path)
    pcm = pcm_of_wav(path.read_bytes(), streamed=True)
    samples, rate = read_wav(path)
    assert rate == 24000 and len(samples) == len(pcm) // 2 > 0


@reference_only(reason="compares with the codec's offline decode of the tiny dummy checkpoint's greedy rows "
                        "(conformance/talker goldens)")
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


@reference_only(reason="usage is checked against our prompt layout and the tiny checkpoint's greedy rows, and the "
                        "voice object and X-Sample-Rate / X-Channels / X-Bit-Depth are our answers' (reference/serve)")
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
    assert sse == streamed == _streamed(server, server.body(PROMPTS["fox"], response_format="pcm"))


def _kinds_not_answered(fmt: str) -> dict[str, str | None]:
    """Per kind of answer (whole, streamed, sse): why the implementation gives none in `fmt`, or None."""
    streamed = IMPL.format_reason(fmt, streamed=True)
    return {"whole": IMPL.format_reason(fmt, streamed=False), "streamed": streamed,
            "sse": streamed or IMPL.not_applicable("sse")}


@needs("repeatable")
@pytest.mark.parametrize("fmt", [pytest.param(f, marks=_not_applicable(_kinds_not_answered(f)["whole"]
                                                                       if all(_kinds_not_answered(f).values())
                                                                       else None))
                                 for f in sorted(FORMATS)])
def test_compressed_answers_decode_to_the_pcm_answer(fmt, server, record_property):
    """Whole, streamed and SSE, each decoded by a decoder other than its encoder and judged against
    the PCM answer of the same kind (encoded_audio.py; bounds: `formats` in server.yaml). Each kind
    the implementation answers in this format; the kinds it does not are named in the results."""
    reasons = _kinds_not_answered(fmt)
    for kind, reason in reasons.items():
        if reason:
            record_property("note", f"{kind}: {reason}")
    pcm, body = server.body(PROMPTS["fox"], response_format="pcm"), server.body(PROMPTS["fox"], response_format=fmt)
    answers = {}
    if not reasons["whole"]:
        whole = server.client.post(SPEECH, json={**body, "stream": False})
        media = IMPL.whole_media_types.get(fmt, MEDIA_TYPES[fmt])
        assert whole.status_code == 200 and whole.headers["content-type"] == media, whole.headers
        answers["whole"] = (whole.content, _whole(server, pcm), False)
    if not reasons["streamed"]:
        with server.client.stream("POST", SPEECH, json=IMPL.streamed(body, "audio")) as response:
            assert response.status_code == 200 and response.headers["content-type"] == MEDIA_TYPES[fmt]
            streamed = response.read()
        answers["streamed"] = (streamed, _streamed(server, pcm), True)
    if not reasons["sse"]:
        answers["sse"] = (_sse(server, body), _streamed(server, pcm), True)
    for name, (data, reference, is_streamed) in answers.items():
        print(f"{fmt} {name}: {judge(fmt, data, reference, is_streamed, IMPL.format_bound(fmt, DOC['formats'][fmt]))}")


@needs("server_errors")
def test_no_request_was_answered_500(server):
    """None of this module's requests answered 5xx (counted from the server's metrics at its start)."""
    errors = IMPL.metrics.server_errors
    assert errors(server.metrics()) - errors(server.at_start) == 0, server.log_tail()
    _still_serving(server)
