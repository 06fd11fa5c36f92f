"""What a request's life meets besides its own work: the client leaving before its answer starts,
the server's stop, and the talker engine's death (watched, and known for good from its first sign)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from fastapi import Request
from vllm.v1.engine.exceptions import EngineDeadError

from reference.serve.admission import Admission
from reference.serve.stop import Stop

logger = logging.getLogger("higgs_ref.serve")
ENGINE_WATCH_S = 0.05  # how often the watchdog asks whether the engine is alive (an attribute read)
# What a client and the log are told once the engine is dead (vLLM's own EngineDeadError points the
# reader at a stack trace "above", in a log the client cannot see).
ENGINE_DEAD = ("the talker engine is dead (its core process or its output loop stopped); the server exits so that "
               "its supervisor can restart it")


class EngineDead(Exception):
    """A request refused because the engine is dead: it arrived after the death, or was waiting
    for a talker slot or its first audio then."""


class ClientLeft(Exception):
    """The client disconnected before its answer started."""


async def unless_client_leaves(request: Request, work: Awaitable, stop: Stop | None = None):
    """`work`'s result, or ClientLeft once the client disconnects first: `work` is cancelled, so a
    request waiting for a talker slot leaves the line and one waiting for its first audio is
    aborted in the engine. (The body is read by now: the next ASGI message is the disconnect.)
    With `stop`, ServerStopping once the server's stop cuts the running requests."""

    async def disconnected():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    if stop is not None:
        work = _cuttable(work, stop)
    return await _unless(work, disconnected(), ClientLeft)


async def _cuttable(work: Awaitable, stop: Stop):
    async with stop.cuttable():
        return await work


async def first_chunk(chunks):
    """The first PCM chunk, or None when the stream has none."""
    return await anext(chunks, None)


async def _unless(work: Awaitable, event: Awaitable, outcome: type[Exception]):
    """`work`'s result, or `outcome()` raised once `event` completes first (`work` is cancelled)."""
    task, watcher = asyncio.ensure_future(work), asyncio.ensure_future(event)
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    if task.cancelled():
        raise outcome()
    return task.result()



async def watch_engine(engine, on_engine_dead, every_s: float = ENGINE_WATCH_S) -> None:
    """Calls `on_engine_dead()` once the engine is dead (its core process gone or its output
    loop ended), even while no request is in flight."""
    while not engine.errored:
        await asyncio.sleep(every_s)
    logger.error(ENGINE_DEAD)
    on_engine_dead()


class EngineWatch:
    """Whether the talker engine is dead, known from its first sign (vLLM's `errored`, or a
    request that met vLLM's EngineDeadError) and for good: /health and every request ask this.
    Knowing it turns away every request waiting for a talker slot, at once, with the dead-engine
    503. `errored` is `dead()`, for the watchdog."""

    def __init__(self, engine, admission: Admission | None):
        self.engine, self.admission, self.known = engine, admission, False

    @property
    def errored(self) -> bool:
        return self.dead()

    def dead(self, exc: BaseException | None = None) -> bool:
        if not self.known and (self.engine.errored or isinstance(exc, EngineDeadError)):
            self.known = True
            if self.admission is not None:
                self.admission.refuse_all(EngineDead)
        return self.known
