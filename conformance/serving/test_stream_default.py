"""A request without `stream_format` on a CPU server whose geometry stitches exactly (issue #21).

The server of test_serving.py's cpu_default variant (Model Runner V1, upstream's lossy V1
geometry) answers such a request whole; this one is the same variant with left context and
holdback covering the codec decoder's reach (server.yaml `exact_default`), so the same request is
streamed, as OpenAI's endpoint does by default, within one 16-bit step of the whole answer. The
second check is the issue's new user: OpenAI's client with only the required fields. Times are
printed beside the server's own TTFA (higgs_serve_ttfa_seconds), never asserted.
"""

import time

import pytest

from conformance import case_files
from conformance.environment import has_cuda
from conformance.serving.serving_client import MODEL_NAME, ServerProcess, body_for, pcm_of_wav, within
from conformance.serving.stream_default import SPEECH, TTFA_COUNT, check_default_answer
from conformance.talker import talker_cases
from higgs_dummy.cache import cached_checkpoint

pytestmark = [
    pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu,
    pytest.mark.reference_only(reason="starts our server with the exact geometry's --set overrides and reads "
                                      "X-Stream-Format-Default and higgs_serve_ttfa_seconds"),
    # vLLM builds for the machine's platform: on a CUDA machine a "cpu" server is refused at its
    # start (the read-back names the attention backend), as test_serving.py's CPU variants skip.
    pytest.mark.skipif(has_cuda(), reason="a CPU server: on a CUDA machine test_serving.py's gpu_* variants "
                                          "check the answer without stream_format"),
]

DOC = case_files.load("serving/server")
EXACT = DOC["exact_default"]
VARIANT = {v["id"]: v for v in DOC["variants"]}[EXACT["variant"]]
PROMPTS = {p["id"]: p for p in talker_cases.load_prompts()["prompts"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if VARIANT["platform"] != "cpu":
        pytest.fail(f"exact_default names {VARIANT['id']}, a {VARIANT['platform']} variant: name a CPU one")
    work = tmp_path_factory.mktemp("serve_exact_default")
    voices = work / "voices"
    voices.mkdir()
    overrides = {**DOC["overrides"], **VARIANT["overrides"], **EXACT["overrides"]}
    srv = ServerProcess(cached_checkpoint("tiny", 0), VARIANT["profile"], "cpu", overrides, work, voices)
    try:
        srv.wait_healthy()
        yield srv
    finally:
        srv.stop()


def test_absent_stream_format_streams_within_one_step_of_the_whole_answer(server):
    health = server.client.get("/health").json()
    assert health["runner"] == VARIANT["runner"], health
    check_default_answer(server, body_for(PROMPTS["fox"]), EXACT["stream_default"], EXACT["bound"])


def test_the_openai_clients_default_request_is_streamed(server):
    openai = pytest.importorskip("openai", reason="the openai package (installed with vLLM) is missing")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=300.0)
    text = PROMPTS["fox"]["text"]
    whole = pcm_of_wav(server.client.post(SPEECH, json={**body_for({"text": text}), "stream": False}).content,
                       streamed=False)
    before = server.metrics()
    start, arrivals, data = time.monotonic(), [], b""
    with client.audio.speech.with_streaming_response.create(
        model=MODEL_NAME, voice="default", input=text, extra_body={"temperature": 0.0},
    ) as response:
        assert response.headers.get("x-stream-format-default", "").startswith("audio;"), dict(response.headers)
        for piece in response.iter_bytes():
            arrivals.append(time.monotonic() - start)
            data += piece
    after = server.metrics()
    within(EXACT["bound"], pcm_of_wav(data, streamed=True), whole)
    count = after[TTFA_COUNT] - before[TTFA_COUNT]
    assert count == 1, f"higgs_serve_ttfa_seconds counted {count:g} first chunks for one stream"
    ttfa = after["higgs_serve_ttfa_seconds_sum"] - before["higgs_serve_ttfa_seconds_sum"]
    print(f"openai client, no stream_format: {len(arrivals)} pieces, first byte {arrivals[0]:.3f} s, last "
          f"{arrivals[-1]:.3f} s; the server's TTFA (higgs_serve_ttfa_seconds) {ttfa:.3f} s")
