"""The speech server at its limits, over HTTP on loopback (issue #33), one server per variant of
server.yaml's `limits` (a CPU server in CI, the V2 default on CUDA in tox -e gpu), whose
geometry stitches exactly:

- overload: 4 x max_num_seqs requests; the slots held by readers that stop after their first
  audio, the queue filled, every other request turned away with 503, Retry-After and a JSON error
  naming the serving limit, before any audio byte; then every admitted one streams its whole answer
  (within the variant's bound). None is lost, none hangs, and the server's counters agree.
- edges: streams whose lengths sit at the chunk edges (and one shorter than the first chunk)
  carry every frame: T x 960 samples, the whole answer within the bound.
- death (last: it ends the server): the engine core killed mid-stream. The stream in flight ends
  without its last chunk (the client raises) or, where the engine had made every row already,
  whole; never cleanly short. /health and a new request answer 503 naming the dead engine, and the
  server exits 1 within 10 s.

No check times the server: the waits are bounds on events it reports.
"""

import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest

from conformance import case_files
from conformance.environment import has_cuda
from conformance.serving.serving_client import ServerProcess, SlowReader, body_for, within
from conformance.talker import talker_cases
from higgs_dummy.cache import cached_checkpoint
from reference.codec.geometry import StreamGeometry
from reference.deploy.resolve import resolve_deployment
from reference.serve.metrics import metric

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu,
              pytest.mark.reference_only(reason="sets our server's slots, queue and geometry by --set, counts with "
                                                "our metrics and kills its engine-core process")]

DOC = case_files.load("serving/server")
LIMITS = DOC["limits"]
SERVERS = {v["id"]: v for v in DOC["variants"]}
PROMPTS = {p["id"]: p for p in talker_cases.load_prompts()["prompts"]}
SPEECH = "/v1/audio/speech"
ENGINE_PARAM = "limited"  # conftest.py: one xdist group per variant
LEAD_IN_ROWS = 7  # a greedy stream cut by max_tokens has max_tokens - 7 real frames (the delay pattern)
EXIT_WITHIN_S = 10.0
SETTLE_S = 60.0  # a bound on waiting for an event the server reports (generous: cores shared under load)


def _marks(case):
    if SERVERS[case["variant"]]["platform"] == "cuda":
        return [pytest.mark.gpu]
    if has_cuda():
        return [pytest.mark.skip(reason="the CPU variant: on a CUDA machine the gpu variant runs instead")]
    return []


@pytest.fixture(scope="module", params=[pytest.param(c, id=c["id"], marks=_marks(c)) for c in LIMITS["variants"]])
def limited(request, tmp_path_factory):
    """(the case, its server variant, the running server)."""
    case = request.param
    variant = SERVERS[case["variant"]]
    work = tmp_path_factory.mktemp(f"limits_{case['id']}")
    (work / "voices").mkdir()
    gpu = DOC["gpu_overrides"] if variant["platform"] == "cuda" else {}
    overrides = {**DOC["overrides"], **gpu, **variant["overrides"], **case["overrides"]}
    server = ServerProcess(cached_checkpoint("tiny", 0), variant["profile"], variant["platform"], overrides, work,
                           work / "voices")
    try:
        server.wait_healthy()
        yield case, overrides, server
    finally:
        server.stop()


def _pcm(server, body, stream: bool, timeout: float = 300.0) -> httpx.Response:
    """The answer, read whole; a streamed one through a connection of its own (callable from threads)."""
    with httpx.Client(base_url=server.url, timeout=timeout) as client:
        if not stream:
            return client.post(SPEECH, json={**body, "stream": False})
        with client.stream("POST", SPEECH, json={**body, "stream_format": "audio"}) as response:
            response.read()
            return response


def test_overload_at_four_times_the_slots_loses_nothing(limited):
    """Held, not timed: the slots are taken by readers that stop after their first audio, so the
    queue fills and the rest is turned away whatever the machine's speed; then everything admitted
    completes, equal to the whole answer within the bound."""
    case, overrides, server = limited
    spec = LIMITS["overload"]
    slots, waiting = int(overrides["stages.0.max_num_seqs"]), int(overrides["serving.max_waiting_requests"])
    body = body_for(PROMPTS[spec["prompt"]], max_tokens=spec["max_tokens"], response_format="pcm")
    held = {**body, "max_tokens": spec["held_max_tokens"]}
    references = {n: _pcm(server, b, stream=False).content for n, b in (("held", held), ("queued", body))}
    before = server.metrics()
    holders = []
    try:
        for _ in range(slots):  # each returns with its first audio: its slot taken
            holders.append(SlowReader(server.url, {**held, "stream_format": "audio"}))
            assert holders[-1].status == 200 and holders[-1].read_body(1)
        with ThreadPoolExecutor(waiting) as pool:
            queued = [pool.submit(_pcm, server, body, True) for _ in range(waiting)]
            try:
                server.wait_for(lambda v: metric(v, "higgs_serve_queue_depth") == waiting, timeout=SETTLE_S,
                                what=f"{waiting} requests did not wait in the queue")
                extra = spec["per_slot"] * slots - slots - waiting
                with ThreadPoolExecutor(extra) as others:  # a request the queue takes instead times out here
                    refused = list(others.map(lambda _: _pcm(server, body, stream=True, timeout=SETTLE_S / 2),
                                              range(extra)))
                kept = [h.read_rest() for h in holders]
            except BaseException:
                for holder in holders:  # the slots free: the queued requests end, and with them the pool
                    holder.leave()
                raise
            served = [f.result(timeout=SETTLE_S * 5) for f in queued]
    finally:
        for holder in holders:
            holder.leave()
    for answer in refused:
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/json" and int(answer.headers["retry-after"]) >= 1
        assert answer.json()["error"]["param"] == "serving.max_waiting_requests", answer.text
    for pcm in kept:
        within(case["bound"], pcm, references["held"])
    for answer in served:
        assert answer.status_code == 200, answer.text
        within(case["bound"], answer.content, references["queued"])
    after = server.wait_for(lambda v: metric(v, "higgs_serve_talker_slots_in_use") == 0
                            and metric(v, "higgs_serve_queue_depth") == 0, timeout=SETTLE_S)
    assert metric(after, "higgs_serve_rejected_total") - metric(before, "higgs_serve_rejected_total") == len(refused)
    print(f"{slots} held, {waiting} waited and were served, {len(refused)} turned away with 503")


def _edge_lengths(geometry: StreamGeometry) -> list[int]:
    """Lengths at the chunk edges `edges.chunks` (0: the first chunk's end) plus each offset, and one
    shorter than the first chunk: where the chunk edges fall is the geometry's (chunks may grow)."""
    spec, ends, emitted = LIMITS["edges"], [], 0
    while len(ends) <= max(spec["chunks"]):
        emitted += geometry.chunk_size(emitted)
        ends.append(emitted)
    edges = {ends[k] + offset for k in spec["chunks"] for offset in spec["offsets"]}
    return sorted(edges | ({spec["shorter"]} if 0 < spec["shorter"] < ends[0] else set()))


def test_streams_at_the_chunk_edges_lose_no_frame(limited):
    case, overrides, server = limited
    variant = SERVERS[case["variant"]]
    geometry = resolve_deployment(variant["profile"], variant["platform"], overrides).geometry
    prompt = PROMPTS[LIMITS["edges"]["prompt"]]
    for frames in _edge_lengths(geometry):
        body = body_for(prompt, max_tokens=frames + LEAD_IN_ROWS, response_format="pcm")
        whole, streamed = _pcm(server, body, stream=False), _pcm(server, body, stream=True)
        assert whole.status_code == streamed.status_code == 200
        assert len(whole.content) == frames * 960 * 2, f"{frames} frames answered as {len(whole.content) / 1920:g}"
        within(case["bound"], streamed.content, whole.content)


def _engine_core(server) -> psutil.Process:
    cores = [p for p in psutil.Process(server.proc.pid).children(recursive=True)
             if "EngineCore" in p.name() + " ".join(p.cmdline())]
    assert len(cores) == 1, [p.cmdline() for p in psutil.Process(server.proc.pid).children(recursive=True)]
    return cores[0]


def test_a_killed_engine_fails_the_stream_answers_503_and_the_server_exits(limited):
    """Runs last in its module: the server does not survive it."""
    case, _, server = limited
    spec = LIMITS["death"]
    body = body_for(PROMPTS[spec["prompt"]], max_tokens=spec["max_tokens"], response_format="pcm",
                    stream_format="audio")
    core = _engine_core(server)
    with httpx.Client(base_url=server.url, timeout=120.0) as client:
        whole = (spec["max_tokens"] - LEAD_IN_ROWS) * 1920  # bytes of the whole answer
        with client.stream("POST", SPEECH, json=body) as response:
            assert response.status_code == 200
            chunks = response.iter_raw()
            received = len(next(chunks))
            core.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            try:
                for data in chunks:
                    received += len(data)
                broke_off = False
            except httpx.RemoteProtocolError:  # the chunked body ended without its last chunk
                broke_off = True
        # Under load the engine can have made every row before the first chunk: the stream then
        # ends whole. Never a clean end short of the whole answer.
        assert broke_off or received == whole, f"the stream ended cleanly after {received} of {whole} bytes"
        print(f"the stream in flight {'broke off' if broke_off else 'ended whole'} after {received} of {whole} bytes")
        deadline = killed + EXIT_WITHIN_S
        while (health := client.get("/health")).status_code == 200:
            assert time.monotonic() < deadline, "/health still answers 200 with the engine dead"
            time.sleep(0.05)
        answer = client.post(SPEECH, json={**body, "max_tokens": 16})
    for reply in (health, answer):
        assert reply.status_code == 503 and "talker engine is dead" in reply.text, reply.text
    assert answer.json()["error"]["type"] == "engine_dead"
    try:
        code = server.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the server still runs {EXIT_WITHIN_S:g} s after the engine died:\n{server.log_tail(80)}")
    exited = time.monotonic() - killed
    print(f"the server exited {code} {exited:.1f} s after the engine core was killed")
    assert code == 1 and exited <= EXIT_WITHIN_S, server.log_tail()
