"""Graceful stop (issue #54): the speech server's GracefulServer over a fake speaker (no engine)
behind a real uvicorn on loopback. After the first signal /health and new requests answer 503
with Retry-After, a request waiting for a talker slot gets that 503 at once, running streams that
end within serving.drain_timeout_s end normally, the rest are cut at the limit (SSE: an `error`
event; raw: no last chunk), and the server stops; a second signal stops it at once. In a child
process, SIGTERM ends `higgs-serve`'s main with exit status 0 after the engine's shutdown; and
SIGTERM and Ctrl-C on a real server: on the CPU in CI, on CUDA in tox -e gpu (`default`, which
runs Model Runner V2 there)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
import torch
import uvicorn

from reference.serve.admission import ServingLimits
from reference.serve.app import build_app
from reference.serve.metrics import ServeMetrics, metric, parse_metrics
from reference.serve.stop import GracefulServer, Stop
from reference.serve.wav import pcm16
from tests.test_serve_failures import Engine, Served
from reference.serve.__main__ import SERVED_MODEL_NAME
from tests.test_serve_quickstart import wait_healthy
from conformance import case_files
from conformance.environment import has_cuda
from conformance.serving.serving_client import die_with_parent, free_port
from higgs_dummy.cache import cached_checkpoint

CHUNK = torch.full((960,), 0.25)
PACE_S = 0.1  # between two chunks of a fake stream
SHORT = 4  # chunks of a stream that ends within the drain limit
DRAIN_S = 1.0
LIMITS = ServingLimits(slots=4, max_waiting_requests=2, max_queue_wait_s=30.0, profile="test.yaml")
SPEECH = "/v1/audio/speech"


class PacedSpeaker:
    """A chunk every PACE_S: SHORT of them for the input "short", without end for "long"."""

    def __init__(self):
        self.metrics = ServeMetrics()
        self.api = type("API", (), {"engine": Engine()})()

    async def stream(self, request, request_id, received, ticket=None, usage=None):
        try:
            n = 0
            while request.text == "long" or n < SHORT:
                await asyncio.sleep(PACE_S)
                n += 1
                yield CHUNK
        finally:
            if ticket is not None:
                ticket.release()

    async def whole(self, request, request_id, ticket=None):
        return torch.cat([c async for c in self.stream(request, request_id, 0.0, ticket)])


class Stopping(Served):
    """GracefulServer in a thread, on a free loopback port; `signal()` is what a signal does."""

    def __init__(self, drain_s=DRAIN_S, graceful_s=0.5):
        super().__init__(PacedSpeaker(), LIMITS)
        stop = Stop(drain_s, "test.yaml")
        self.server = GracefulServer(uvicorn.Config(build_app(self.service, stop=stop), host="127.0.0.1",
                                                    port=int(self.url.rsplit(":", 1)[1]), log_level="critical",
                                                    timeout_graceful_shutdown=graceful_s), stop)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def signal(self) -> None:
        self.server.handle_exit(signal.SIGTERM, None)


def _body(stream_format, length):
    return {"model": "m", "input": length, "stream_format": stream_format, "response_format": "pcm"}


async def _opened(opened: list, n: int, streams) -> None:
    """Until `n` streams have their first audio (a stream that failed instead raises here)."""
    while len(opened) < n:
        for stream in streams:
            if stream.done():
                stream.result()
        await asyncio.sleep(0.01)


async def _ending(client, stream_format, length, opened: list):
    """(seconds from the signal to the body's end, the body, whether it broke off); `opened` gets
    one item once the first audio has arrived."""
    async with client.stream("POST", SPEECH, json=_body(stream_format, length)) as response:
        assert response.status_code == 200
        received, broke = bytearray(), False
        try:
            async for data in response.aiter_raw():
                if not received:
                    opened.append(stream_format)
                received += data
        except httpx.RemoteProtocolError:
            broke = True
    return time.monotonic(), bytes(received), broke


def _events(body: bytes) -> list[dict]:
    return [json.loads(line[len(b"data: "):]) for line in body.split(b"\n\n") if line]


def test_sigterm_lets_streams_finish_within_the_drain_limit_then_cuts_the_rest_and_stops():
    async def scenario(s):
        async with httpx.AsyncClient(base_url=s.url, timeout=20.0) as client:
            opened: list = []
            streams = [asyncio.create_task(_ending(client, fmt, length, opened))
                       for fmt, length in (("sse", "short"), ("audio", "short"), ("sse", "long"), ("audio", "long"))]
            await _opened(opened, 4, streams)
            waiter = asyncio.create_task(client.post(SPEECH, json=_body("audio", "short")))
            while metric(parse_metrics((await client.get("/metrics")).text), "higgs_serve_queue_depth") < 1:
                await asyncio.sleep(0.01)
            signalled = time.monotonic()
            s.signal()
            refused = await waiter
            health = await client.get("/health")
            late = await client.post(SPEECH, json=_body("audio", "short"))
            endings = await asyncio.gather(*streams)
        return signalled, refused, health, late, endings

    with Stopping() as s:
        signalled, refused, health, late, endings = asyncio.run(scenario(s))
        s.thread.join(DRAIN_S + 2)
        assert not s.thread.is_alive(), "the server did not stop"
    for answer in (refused, late):  # waiting for a slot, and arriving after the signal
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "1"
        assert answer.json()["error"]["param"] == "serving.drain_timeout_s"
    assert health.status_code == 503 and health.json() == {"status": "stopping"}
    (sse_short, _, _), (raw_short, raw_body, raw_broke), (sse_long, sse_body, _), (raw_long, _, long_broke) = endings
    short_sse_events = _events(endings[0][1])
    assert short_sse_events[-1]["type"] == "speech.audio.done"
    assert not raw_broke and raw_body == pcm16(CHUNK) * SHORT
    assert max(sse_short, raw_short) - signalled < DRAIN_S  # they ran to their end
    long_events = _events(sse_body)
    assert long_events[-1]["type"] == "error" and long_events[-1]["error"]["type"] == "server_stopping"
    assert "serving.drain_timeout_s 1 s" in long_events[-1]["error"]["message"]
    assert all(e["type"] == "speech.audio.delta" for e in long_events[:-1])
    assert base64.b64decode(long_events[0]["audio"]) == pcm16(CHUNK)
    assert long_broke
    for ended in (sse_long, raw_long):  # cut at the limit, not before, and known within a second of it
        assert DRAIN_S <= ended - signalled < DRAIN_S + 1


def test_a_second_signal_stops_at_once():
    async def scenario(s):
        async with httpx.AsyncClient(base_url=s.url, timeout=20.0) as client:
            opened: list = []
            stream = asyncio.create_task(_ending(client, "audio", "long", opened))
            await _opened(opened, 1, [stream])
            signalled = time.monotonic()
            s.signal()
            await asyncio.sleep(0.2)
            s.signal()
            await asyncio.to_thread(s.thread.join, 5)
            stopped = time.monotonic()
            try:
                await asyncio.wait_for(stream, 5)
            except Exception:
                pass
        return stopped - signalled

    with Stopping(drain_s=30.0, graceful_s=10.0) as s:  # neither the drain nor uvicorn's own wait
        took = asyncio.run(scenario(s))
        assert not s.thread.is_alive()
    assert took < 2.0


CHILD = """
import asyncio, sys, types
import reference.serve.__main__ as serve
from tests.test_serve_stop import PacedSpeaker, LIMITS
from tests.test_serve_app import EXACT, FakeService
from reference.serve.admission import Admission
from reference.serve.stop import Stop

class Engine:
    errored = False
    def shutdown(self):
        print("engine shut down", flush=True)

speaker = PacedSpeaker()
service = FakeService(speaker=speaker, model_name="m", runner="v1", profile="default", max_model_len=1024,
                      default_sampling={}, voices={"default": None}, stream_default=EXACT,
                      admission=Admission(LIMITS, speaker.metrics))
engine = Engine()
speaker.api.engine, speaker.api.stage = engine, None  # start() is replaced below: the stage is not warmed
serve.build_service = lambda args: (service, engine, None, Stop(float(sys.argv[2]), "test.yaml"), 5)
async def start(*_):
    print("serving", flush=True)
serve.start = start
sys.exit(serve.main(["--model", "unused", "--port", sys.argv[1], "--log-level", "warning"]))
"""


def test_sigterm_ends_the_served_process_with_status_0_after_the_engine_stops():
    port = free_port()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(port), str(DRAIN_S)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().strip()
        assert line == "serving", child.stderr.read() if line else child.communicate(timeout=10)[1]

        async def scenario():
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20.0) as client:
                for _ in range(200):  # uvicorn listens a moment after the app's start
                    try:
                        await client.get("/health")
                        break
                    except httpx.ConnectError:
                        await asyncio.sleep(0.02)
                opened: list = []
                stream = asyncio.create_task(_ending(client, "sse", "long", opened))
                await _opened(opened, 1, [stream])
                signalled = time.monotonic()
                child.send_signal(signal.SIGTERM)
                ended, body, _ = await stream
                return ended - signalled, _events(body)[-1]["type"]

        took, last = asyncio.run(scenario())
        out, err = child.communicate(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    assert (child.returncode, last) == (0, "error"), err
    assert DRAIN_S <= took < DRAIN_S + 1
    assert "engine shut down" in out


# The real server: on the CPU in CI; on CUDA (marker gpu) in tox -e gpu, where no GPU skips it with
# its reason (conftest.py) and a GPU skips the CPU variant, as conformance/serving/test_server_limits.py does.
CPU_VARIANT_ON_CUDA = "the CPU variant: on a CUDA machine the cuda variant runs instead"
PLATFORMS = [pytest.param("cpu", marks=[pytest.mark.cpu]
                          + ([pytest.mark.skip(reason=CPU_VARIANT_ON_CUDA)] if has_cuda() else [])),
             pytest.param("cuda", marks=pytest.mark.gpu)]
# The no_eoc dummy checkpoint, whose every stream runs to its max_tokens: the tiny greedy one ends a
# 150-word input after 742 rows (the talker oracle's count), within the 2 s drain at the 1-2 ms a row
# estimated for a GPU. 203 prompt tokens + 3800 rows fit `default`'s max_model_len 4096: 3.8 s or
# more a stream at 1 ms a row.
REAL_INPUT, REAL_MAX_TOKENS = "word " * 40, 3800


async def _real_stream(client, stream_format: str, opened: list):
    """A speech stream long enough to outlast the drain: (when it ended, its last bytes, whether it broke off)."""
    body = {"model": SERVED_MODEL_NAME, "input": REAL_INPUT, "stream_format": stream_format,
            "response_format": "pcm", "max_tokens": REAL_MAX_TOKENS}
    received, broke = b"", False
    async with client.stream("POST", SPEECH, json=body) as response:
        assert response.status_code == 200, await response.aread()
        try:
            async for data in response.aiter_raw():
                if not received:
                    opened.append(stream_format)
                received = (received + data)[-1000:]
        except httpx.RemoteProtocolError:
            broke = True
    return time.monotonic(), received, broke


def _platform_sets(platform: str) -> list[str]:
    """`--set` arguments for the platform. On CUDA, as the serving checks' servers boot there: the
    talker in float32 (the CPU's dtype under `default`) and server.yaml's `gpu_overrides` (a fixed
    1 GiB KV cache, so that the server shares the GPU with tox -e gpu's other engines)."""
    if platform != "cuda":
        return []
    overrides = {"stages.0.dtype": "float32", **case_files.load("serving/server")["gpu_overrides"]}
    return [a for key, value in overrides.items() for a in ("--set", f"{key}={value}")]


def _signalled_real_server(tmp_path, platform: str, drain_s: float, send_signal):
    """The tiny no_eoc dummy checkpoint served under `default` on `platform` with the drain limit
    `drain_s`: an SSE and a raw stream run when `send_signal(server)` is called; 0.2 s later
    /health and a new request are asked. (signalled, health, late, endings, exit status, log)."""
    port, log_path = free_port(), tmp_path / "server.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "reference.serve", "--model",
                                   str(cached_checkpoint("tiny", 0, "no_eoc")), "--platform", platform,
                                   "--port", str(port), "--set", f"serving.drain_timeout_s={drain_s}",
                                   *_platform_sets(platform)],
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                  preexec_fn=die_with_parent)

    async def scenario():
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60.0) as client:
            opened: list = []
            streams = [asyncio.create_task(_real_stream(client, fmt, opened)) for fmt in ("sse", "audio")]
            await _opened(opened, 2, streams)
            signalled = time.monotonic()
            send_signal(server)
            await asyncio.sleep(0.2)
            try:
                health, late = await client.get("/health"), await client.post(SPEECH, json={
                    "model": SERVED_MODEL_NAME, "input": "Hi."})
            except httpx.TransportError:  # the server has already stopped listening
                health = late = None
            endings = await asyncio.gather(*streams)
            return signalled, health, late, endings

    try:
        wait_healthy(server, port, log_path)
        signalled, health, late, endings = asyncio.run(scenario())
        status = server.wait(timeout=60)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
    return signalled, health, late, endings, status, log_path.read_text(errors="replace")


def _last_event(sse_tail: bytes) -> dict:
    return _events(sse_tail[sse_tail.rindex(b"data: "):])[-1]


@pytest.mark.slow
@pytest.mark.dummy_weights
@pytest.mark.parametrize("platform", PLATFORMS)
def test_sigterm_during_streams_on_a_real_server(tmp_path, platform):
    """SIGTERM to the server's process (as Docker and Kubernetes send it), drain limit 2 s, while an
    SSE and a raw stream run: /health and a new request answer 503, the SSE stream ends with the
    `error` event and the raw one breaks off, both within the limit + 1 s, and the exit status is 0."""
    drain_s = 2.0
    signalled, health, late, endings, status, log = _signalled_real_server(
        tmp_path, platform, drain_s, lambda server: server.send_signal(signal.SIGTERM))
    assert health.status_code == 503 and late.status_code == 503 and late.headers["Retry-After"] == "2"
    (sse_end, sse_tail, _), (raw_end, _, raw_broke) = endings
    last = _last_event(sse_tail)
    assert last.get("error", {}).get("type") == "server_stopping", f"the SSE stream was not cut: it ended with {last}"
    assert raw_broke
    for ended in (sse_end, raw_end):
        assert drain_s <= ended - signalled < drain_s + 1, log[-3000:]
    assert status == 0, f"SIGTERM: exit status {status}:\n{log[-3000:]}"


@pytest.mark.slow
@pytest.mark.dummy_weights
@pytest.mark.parametrize("platform", PLATFORMS)
def test_ctrl_c_to_the_process_group_stops_engine_and_server_at_once_with_status_0(tmp_path, platform):
    """Ctrl-C in a terminal signals the whole process group: vLLM's engine core stops with it, so
    the drain cannot run. Either the engine core finishes its requests as aborted before it exits
    (each stream cut, one log line each: the engine aborted it) or it is gone first (the server sees
    the death). Either way each stream learns its end within seconds (SSE: an `error` event, never
    `speech.audio.done`; 2.4 s on the 2-core CPU, most of it the engine core's own exit), and the
    exit status is still 0: the stop was asked for."""
    signalled, _, _, endings, status, log = _signalled_real_server(
        tmp_path, platform, 20.0, lambda server: os.killpg(server.pid, signal.SIGINT))
    (sse_end, sse_tail, _), (raw_end, _, raw_broke) = endings
    assert _last_event(sse_tail).get("error", {}).get("type") in ("engine_aborted", "engine_dead"), _last_event(sse_tail)
    assert raw_broke
    for ended in (sse_end, raw_end):
        assert ended - signalled < 5, log[-3000:]
    assert status == 0, f"Ctrl-C: exit status {status}:\n{log[-3000:]}"
    ended_by = ("the talker engine stopped with the signal", "before its end (the engine stopping")
    assert any(line in log for line in ended_by), log[-3000:]
