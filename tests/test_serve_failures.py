"""What a client meets when a speech request fails or the server is full, on a fake speaker (no
engine) behind a real uvicorn on loopback: the status goes out with the first audio, so a
failure before it is a 5xx with a JSON body; a failure after it ends the chunked body without its
last chunk (the client raises) or sends an SSE `error` event; a dead engine is a 503 naming it, and
the watchdog calls for the exit; the admission queue turns requests away with 503 and Retry-After
before any byte, and lets a waiting request in when a slot frees."""

import asyncio
import base64
import json
import subprocess
import sys
import threading
import time

import httpx
import pytest
import torch
import uvicorn

import reference.serve.__main__ as serve
from reference.serve.admission import Admission, Overloaded, ServingLimits
from reference.serve.app import build_app
from reference.serve.lifecycle import watch_engine
from reference.serve.metrics import ServeMetrics, metric, parse_metrics
from reference.serve.wav import HEADER_BYTES, pcm16
from tests.test_serve_app import EXACT, FakeService
from conformance.serving.serving_client import free_port

CHUNK = torch.full((960,), 0.25)
BODY = {"model": "m", "input": "Hello.", "stream_format": "audio", "response_format": "pcm"}


class Engine:
    def __init__(self):
        self.errored = False
        self.dead_error = RuntimeError("EngineCore died")

    async def check_health(self):
        if self.errored:
            raise self.dead_error

    async def collective_rpc(self, method):
        return [0]  # talker_open_requests of one worker


class ScriptedSpeaker:
    """Streams `script`: tensors are chunks, an exception is raised where it stands, "wait" waits
    for the test to set `go`. Gives its ticket back when it ends."""

    def __init__(self, script):
        self.script, self.metrics, self.go = script, ServeMetrics(), threading.Event()
        self.api = type("API", (), {"engine": Engine()})()

    async def stream(self, request, request_id, received, ticket=None, usage=None):
        try:
            for item in self.script:
                if isinstance(item, BaseException):
                    raise item
                if item == "wait":
                    await asyncio.to_thread(self.go.wait, 20)
                    continue
                await asyncio.sleep(0)
                yield item
        finally:
            if ticket is not None:
                ticket.release()

    async def whole(self, request, request_id, ticket=None):
        chunks = [c async for c in self.stream(request, request_id, 0.0, ticket)]
        return torch.cat(chunks)


class Served:
    """The app over uvicorn in a thread, on a free loopback port."""

    def __init__(self, speaker, limits=None, on_engine_dead=None):
        self.speaker = speaker
        pace = getattr(speaker, "pace", None)  # a speaker that measures the talker's pace gates on it
        service = FakeService(speaker=speaker, model_name="m", runner="v1", profile="default", max_model_len=1024,
                              default_sampling={}, voices={"default": None}, stream_default=EXACT,
                              admission=None if limits is None else Admission(limits, speaker.metrics, pace))
        self.service = service
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(build_app(service, on_engine_dead=on_engine_dead), host="127.0.0.1",
                                                    port=port, log_level="critical"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)

    def metrics(self):
        return parse_metrics(httpx.get(f"{self.url}/metrics", timeout=10).text)


def _post(url, body=BODY, timeout=20.0):
    return httpx.post(f"{url}/v1/audio/speech", json=body, timeout=timeout)


def test_a_failure_before_the_first_audio_is_a_500_with_a_json_body():
    with Served(ScriptedSpeaker([ValueError("the codec broke")])) as s:
        response = _post(s.url)
    assert response.status_code == 500
    assert response.json()["error"]["message"] == "ValueError: the codec broke"


def test_a_stream_without_audio_is_a_200_with_an_empty_body():
    with Served(ScriptedSpeaker([])) as s:
        response = _post(s.url)
        wav = _post(s.url, {**BODY, "response_format": "wav"})
    assert (response.status_code, response.content) == (200, b"")
    assert wav.status_code == 200 and len(wav.content) == HEADER_BYTES


def test_a_failure_after_the_first_audio_never_looks_like_a_finished_stream():
    with Served(ScriptedSpeaker([CHUNK, CHUNK, ValueError("the codec broke")])) as s:
        received = bytearray()
        with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
            with httpx.stream("POST", f"{s.url}/v1/audio/speech", json=BODY, timeout=20.0) as response:
                assert response.status_code == 200
                for data in response.iter_bytes():
                    received += data
        assert bytes(received) == pcm16(CHUNK) * 2
        with httpx.stream("POST", f"{s.url}/v1/audio/speech", json={**BODY, "stream_format": "sse"},
                          timeout=20.0) as response:
            events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["speech.audio.delta", "speech.audio.delta", "error"]
    assert base64.b64decode(events[0]["audio"]) == pcm16(CHUNK)
    assert events[-1]["error"]["message"] == "ValueError: the codec broke"


def test_a_dead_engine_is_a_503_naming_it_and_the_watchdog_calls_for_the_exit():
    dead = threading.Event()
    speaker = ScriptedSpeaker([CHUNK])
    with Served(speaker, on_engine_dead=dead.set) as s:
        assert _post(s.url).status_code == 200
        assert not dead.wait(0.6), "the watchdog fired on a live engine"
        speaker.api.engine.errored = True
        assert dead.wait(5), "the watchdog did not see the dead engine"
        response, health = _post(s.url), httpx.get(f"{s.url}/health", timeout=10)
    for answer in (response, health):
        assert answer.status_code == 503
        assert "talker engine is dead" in answer.text, answer.text
    assert response.json()["error"]["type"] == "engine_dead"


def test_an_engine_that_dies_before_the_first_audio_is_a_503_not_a_200():
    speaker = ScriptedSpeaker([])

    async def dies(request, request_id, received, ticket=None, usage=None):
        speaker.api.engine.errored = True
        raise RuntimeError("EngineDeadError")
        yield  # an async generator

    speaker.stream = dies
    with Served(speaker) as s:
        response = _post(s.url)
    assert response.status_code == 503 and response.json()["error"]["type"] == "engine_dead"


def test_the_watchdog_returns_only_once_the_engine_is_dead():
    engine, calls = Engine(), []

    async def run():
        task = asyncio.create_task(watch_engine(engine, lambda: calls.append(1), every_s=0.01))
        await asyncio.sleep(0.1)
        assert not task.done() and calls == []
        engine.errored = True
        await asyncio.wait_for(task, 2)

    asyncio.run(run())
    assert calls == [1]


LIMITS = ServingLimits(slots=1, max_waiting_requests=1, max_queue_wait_s=30.0, profile="test.yaml")


def test_the_queue_turns_away_the_request_past_its_length_with_503_and_retry_after():
    """One slot, one place in line: the first request holds the slot (its stream waits), the second
    waits in line, the third is turned away at once; when the first ends, the second is served."""
    speaker = ScriptedSpeaker([CHUNK, "wait", CHUNK])
    with Served(speaker, LIMITS) as s:
        with httpx.stream("POST", f"{s.url}/v1/audio/speech", json=BODY, timeout=20.0) as first:
            assert first.status_code == 200
            with httpx.Client(timeout=20.0) as client:
                second = _background(lambda: client.post(f"{s.url}/v1/audio/speech", json=BODY))
                _until(lambda: metric(s.metrics(), "higgs_serve_queue_depth") == 1)
                third = _post(s.url)
                assert third.status_code == 503
                assert third.headers["retry-after"] == "30" and third.content.startswith(b'{"error"')
                error = third.json()["error"]
                assert error["param"] == "serving.max_waiting_requests" and "test.yaml" in error["message"]
                s.speaker.go.set()
                assert first.read() == pcm16(CHUNK) * 2
                assert second.result(20).status_code == 200
        values = s.metrics()
    assert values['higgs_serve_rejected_total{limit="max_waiting_requests"}'] == 1
    assert metric(values, "higgs_serve_queue_depth") == 0


def test_a_request_that_waits_past_max_queue_wait_s_is_turned_away():
    speaker = ScriptedSpeaker([CHUNK, "wait", CHUNK])
    limits = ServingLimits(slots=1, max_waiting_requests=4, max_queue_wait_s=0.5, profile="test.yaml")
    with Served(speaker, limits) as s:
        with httpx.stream("POST", f"{s.url}/v1/audio/speech", json=BODY, timeout=20.0) as first:
            assert first.status_code == 200
            late = _post(s.url)
            s.speaker.go.set()
            first.read()
        assert late.status_code == 503 and late.headers["retry-after"] == "1"
        assert late.json()["error"]["param"] == "serving.max_queue_wait_s"
        assert _post(s.url).status_code == 200, "the slot was not given back"
        assert s.metrics()['higgs_serve_rejected_total{limit="max_queue_wait_s"}'] == 1


def test_admission_gives_a_slot_back_once_however_often_it_is_released():
    async def run():
        admission = Admission(ServingLimits(1, 0, 0.2), ServeMetrics())
        ticket = await admission.admit()
        with pytest.raises(Overloaded, match="max_waiting_requests 0"):
            await admission.admit()
        ticket.release()
        ticket.release()
        again = await admission.admit()
        with pytest.raises(Overloaded):
            await admission.admit()
        again.release()

    asyncio.run(run())


def _background(fn):
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future


def _until(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the server never reached the state waited for"
        time.sleep(0.05)


HOLD_THE_GIL = """
import ctypes, sys, time
import reference.serve.__main__ as serve
serve.DEAD_LINGER_S, serve.EXIT_DEADLINE_S = 0.2, 1
from reference.serve.stop import Stop
class Server:
    should_exit, stop = False, Stop(0.0)
serve.exit_on_engine_death(Server(), [])
print("holding", flush=True)
ctypes.PyDLL(None).sleep(30)  # libc's sleep through PyDLL keeps the GIL: no Python thread runs
sys.exit(0)
"""


def test_the_exit_deadline_holds_while_a_thread_keeps_the_gil():
    """A shutdown stuck in C code that holds the GIL (no Python timer can run) still ends at
    EXIT_DEADLINE_S with ENGINE_DEAD_EXIT, and the log shows where each thread was."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", HOLD_THE_GIL], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - began
    assert done.stdout.strip() == "holding", done.stderr
    assert done.returncode == serve.ENGINE_DEAD_EXIT == 1, done.stderr
    assert took < 20, f"the process lived {took:.1f} s past a 1 s deadline"
    held = next(n for n, line in enumerate(HOLD_THE_GIL.splitlines(), 1) if "PyDLL" in line)
    assert f'File "<string>", line {held} in <module>' in done.stderr, done.stderr  # where it hung
