"""Health that never lies (issue #54): the speech server's Speaker over a fake speech API whose
engine dies on the check's word, behind a real uvicorn on loopback. From the moment the server
knows the engine is dead (vLLM's `errored`, or a request meeting vLLM's EngineDeadError before
that flag) /health is 503 and stays so; a request waiting for a talker slot then gets the
dead-engine 503 at once; the log holds one line per failed request and no traceback; what the
client reads says what happened without pointing at a log it cannot see."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

import httpx
import pytest
import torch
from vllm.v1.engine.exceptions import EngineDeadError

from reference.serve.admission import ServingLimits
from reference.serve.lifecycle import ENGINE_DEAD
from reference.serve.audio import Speaker
from reference.serve.metrics import ServeMetrics, metric, parse_metrics
from reference.speech import EngineAborted
from tests.test_serve_failures import BODY, Served

# No engine and no platform: the GPU selection runs these too, against the host's vLLM (its EngineDeadError).
# The engine core killed under a real server: conformance/serving/test_server_limits.py, on the CPU and on CUDA.
pytestmark = pytest.mark.every_platform

CHUNK = torch.full((960,), 0.25)
SPEECH = "/v1/audio/speech"
LIMITS = ServingLimits(slots=4, max_waiting_requests=2, max_queue_wait_s=30.0, profile="test.yaml")


class Engine:
    """vLLM's AsyncLLM as the server sees it: `errored` (set by the check), `dead_error`,
    `check_health`, abort, the workers' RPC."""

    def __init__(self):
        self.errored = False

    @property
    def dead_error(self) -> BaseException:
        return EngineDeadError()

    async def check_health(self):
        if self.errored:
            raise self.dead_error

    async def abort(self, request_id):
        pass

    async def collective_rpc(self, method):
        return [0]


class PassStage:
    """The code2wav stage, reduced: one PCM chunk per item of the frame source."""

    def stream(self, frames):
        async def chunks():
            async for _ in frames:
                yield CHUNK

        return chunks()


class DyingAPI:
    """SpeechAPI's streaming: a first row, then nothing until `kill()`, when every request raises
    vLLM's EngineDeadError (as AsyncLLM.generate does once its engine core is gone)."""

    def __init__(self):
        self.engine, self.stage, self.dies = Engine(), PassStage(), asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def stream_rows(self, request, request_id):
        self.loop = asyncio.get_running_loop()
        if not self.dies.is_set():
            yield [[7] * 8]
            await self.dies.wait()
        raise EngineDeadError()

    def kill(self) -> None:
        self.loop.call_soon_threadsafe(self.dies.set)


@contextlib.contextmanager
def warnings_logged():
    """Every record at WARNING and up from our loggers and uvicorn's (whatever levels an earlier
    server in this process left on them), as formatted lines: a traceback is several."""
    lines, formatter = [], logging.Formatter("%(levelname)s %(name)s %(message)s")

    class Keep(logging.Handler):
        def emit(self, record):
            lines.extend(formatter.format(record).splitlines())

    handler, error_log = Keep(logging.WARNING), logging.getLogger("uvicorn.error")
    targets, level = [logging.getLogger(), logging.getLogger("uvicorn")], error_log.level
    for target in targets:
        target.addHandler(handler)
    error_log.setLevel(logging.WARNING)
    try:
        yield lines
    finally:
        error_log.setLevel(level)
        for target in targets:
            target.removeHandler(handler)


def _served(api):
    return Served(Speaker(api=api, metrics=ServeMetrics()), LIMITS, on_engine_dead=lambda: None)


async def _open(client, stream_format):
    """A streamed request whose first audio arrived: (its context, response, bytes so far)."""
    context = client.stream("POST", SPEECH, json={**BODY, "stream_format": stream_format})
    response = await context.__aenter__()
    assert response.status_code == 200
    chunks = response.aiter_raw()
    return context, chunks, bytearray(await anext(chunks))


async def _finish(stream) -> tuple[bytes, bool]:
    """The rest of the body, and whether it broke off (no last chunk)."""
    context, chunks, received = stream
    try:
        async for data in chunks:
            received += data
        broke = False
    except httpx.RemoteProtocolError:
        broke = True
    await context.__aexit__(None, None, None)
    return bytes(received), broke


async def _until(client, condition, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not condition(parse_metrics((await client.get("/metrics")).text)):
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


def test_a_request_that_meets_the_dead_engine_first_makes_health_503_and_turns_the_line_away():
    """Four streams (two raw, two SSE) past their first audio and one request in line when the
    engine dies, vLLM's `errored` not yet set: the raw streams break off, the SSE ones end with an
    `error` event naming the dead engine, the waiter gets the dead-engine 503, /health is 503 from
    then on, and the log holds the watchdog's line and one line per failed request."""
    api = DyingAPI()
    with _served(api) as s, warnings_logged() as lines:

        async def run():
            async with httpx.AsyncClient(base_url=s.url, timeout=20) as client:
                streams = [await _open(client, f) for f in ("audio", "audio", "sse", "sse")]
                waiter = asyncio.create_task(client.post(SPEECH, json=BODY))
                await _until(client, lambda v: metric(v, "higgs_serve_queue_depth") == 1, "no request waits")
                assert not lines, lines
                api.kill()
                endings = [await _finish(stream) for stream in streams]
                health = [await client.get("/health") for _ in range(3)]
                answers = await asyncio.wait_for(waiter, 5), await client.post(SPEECH, json=BODY)
                deadline = time.monotonic() + 10
                while f"ERROR higgs_ref.serve {ENGINE_DEAD}" not in lines:  # the watchdog's, at its next poll
                    assert time.monotonic() < deadline, lines
                    await asyncio.sleep(0.01)
                return endings, *answers, health

        endings, waited, later, health = asyncio.run(run())
        assert api.engine.errored is False  # the server knew it from the requests alone
    for received, broke in endings[:2]:
        assert broke, "a raw stream cut by the dead engine ended like a finished one"
    for received, broke in endings[2:]:
        events = [json.loads(line[6:]) for line in received.decode().splitlines() if line.startswith("data: ")]
        assert not broke and events[-1] == {"type": "error", "error": {"message": ENGINE_DEAD, "type": "engine_dead"}}
        assert all(e["type"] == "speech.audio.delta" for e in events[:-1])
    for answer in (waited, later, *health):
        assert answer.status_code == 503 and ENGINE_DEAD in answer.text, answer.text
    assert waited.json()["error"]["type"] == later.json()["error"]["type"] == "engine_dead"
    assert not any("stack trace" in text for text in [ENGINE_DEAD, *lines])
    assert lines.count(f"ERROR higgs_ref.serve {ENGINE_DEAD}") == 1, lines  # the watchdog's
    cut = [line for line in lines if line.startswith("WARNING higgs_ref.serve speech request ")]
    assert len(cut) == 5 and len({line.split()[4] for line in cut}) == 5, lines  # one per request, each once
    assert len(lines) == 6, "\n".join(lines)


def test_a_waiter_gets_the_dead_engine_503_at_once_and_health_stays_503():
    """vLLM's `errored` set while one request waits for a slot (the slots held by streams that
    make no rows meanwhile) and nobody asks: the watchdog's next poll turns the waiter away (not
    max_queue_wait_s, 30 s, later), and /health is 503 from then on."""
    api = DyingAPI()
    with _served(api) as s, warnings_logged() as lines:

        async def run():
            async with httpx.AsyncClient(base_url=s.url, timeout=40) as client:
                streams = [await _open(client, "audio") for _ in range(LIMITS.slots)]
                waiter = asyncio.create_task(client.post(SPEECH, json=BODY))
                await _until(client, lambda v: metric(v, "higgs_serve_queue_depth") == 1, "no request waits")
                assert (await client.get("/health")).status_code == 200
                api.engine.errored = True
                died = time.monotonic()
                answer = await waiter
                waited = time.monotonic() - died
                health = [(await client.get("/health")).status_code for _ in range(5)]
                api.kill()
                for stream in streams:
                    await _finish(stream)
                return answer, waited, health

        answer, waited, health = asyncio.run(run())
    assert health == [503] * 5
    assert answer.status_code == 503 and answer.json()["error"]["type"] == "engine_dead", answer.text
    assert waited < 2.0, f"the request in line was answered {waited:.2f} s after the engine died"
    assert sum("speech request" in line for line in lines) == 1 + LIMITS.slots, lines  # the waiter, the streams


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
def test_a_stream_failing_on_a_live_engine_logs_its_traceback_once(stream_format):
    """Not the engine's death: a defect, so its traceback is kept, once, and /health stays 200."""
    api = DyingAPI()

    async def broken(request, request_id):
        yield [[7] * 8]
        raise ValueError("the codec broke")

    api.stream_rows = broken
    body = b""
    with _served(api) as s, warnings_logged() as lines:
        with httpx.stream("POST", f"{s.url}{SPEECH}", json={**BODY, "stream_format": stream_format},
                          timeout=20) as response:
            with contextlib.suppress(httpx.RemoteProtocolError):
                body = response.read()
        health = httpx.get(f"{s.url}/health", timeout=10)
    assert health.status_code == 200
    if stream_format == "sse":
        assert b'"message": "ValueError: the codec broke", "type": "server_error"' in body
    assert sum(line.startswith("Traceback") for line in lines) == 1, "\n".join(lines)
    assert sum("failed after its first audio" in line for line in lines) == 1, lines


@pytest.mark.parametrize("stream_format", ["audio", "sse"])
def test_a_stream_the_engine_aborts_ends_as_an_error_not_as_a_whole_answer(stream_format):
    """The engine finishing a request as aborted (its shutdown on a signal to the process group)
    is no end of speech: SSE gets the `error` event saying so, a raw stream breaks off, one log line."""
    api = DyingAPI()

    async def aborted(request, request_id):
        yield [[7] * 8]
        raise EngineAborted(f"the talker engine aborted request {request_id} before its end")

    api.stream_rows = aborted
    body, broke = b"", False
    with _served(api) as s, warnings_logged() as lines:
        with httpx.stream("POST", f"{s.url}{SPEECH}", json={**BODY, "stream_format": stream_format},
                          timeout=20) as response:
            try:
                body = response.read()
            except httpx.RemoteProtocolError:
                broke = True
    if stream_format == "sse":
        events = [json.loads(e[len(b"data: "):]) for e in body.split(b"\n\n") if e]
        assert events[-1]["type"] == "error" and events[-1]["error"]["type"] == "engine_aborted", events[-1]
        assert all(e["type"] != "speech.audio.done" for e in events)
    else:
        assert broke
    assert not any(line.startswith("Traceback") for line in lines), "\n".join(lines)
    assert sum("before its end" in line for line in lines) == 1, lines


def test_speech_api_raises_when_the_engine_aborts_a_stream():
    """SpeechAPI.stream_rows over an engine whose output finishes the request as aborted."""
    from types import SimpleNamespace

    from higgs_dummy.cache import cached_checkpoint
    from reference.speech import SpeechAPI, SpeechRequest

    def output(reason):
        return SimpleNamespace(outputs=[SimpleNamespace(logprobs=None, finish_reason=reason)])

    class Ending:
        def __init__(self, reason):
            self.reason = reason

        async def generate(self, tokens, params, request_id):
            yield output(None)
            yield output(self.reason)

    async def rows(reason):
        api = SpeechAPI(Ending(reason), cached_checkpoint("tiny", 0), "v1")
        return [r async for r in api.stream_rows(SpeechRequest("Hello."), "r1")]

    assert asyncio.run(rows("stop")) == []
    with pytest.raises(EngineAborted, match="aborted request r1 before its end"):
        asyncio.run(rows("abort"))
