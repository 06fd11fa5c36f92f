"""Graceful stop: what the speech server does between SIGTERM (or Ctrl-C) and its exit.

The first signal starts the drain: from then on /health and every new speech request answer 503
(Retry-After, `param` "serving.drain_timeout_s"), and the requests waiting for a talker slot get
that 503 at once. The listening socket stays open, so a client is told rather than refused. The
requests already running get the profile's `serving.drain_timeout_s` to finish; past it the rest
are cut: a stream's SSE answer ends with an `error` event, a raw one without its last chunk, and a
request without audio yet gets the 503. Then uvicorn stops (its own shutdown finds nothing left
to wait for) and the app's shutdown stops the engine; the exit status is 0. A second signal stops
at once: uvicorn's `force_exit`, without waiting for anything or stopping the engine first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math

import uvicorn

from reference.serve.admission import Overloaded

logger = logging.getLogger("higgs_ref.serve")
CUT_GRACE_S = 0.3  # after the cut, how long the cut requests get to send their last bytes
POLL_S = 0.02  # how often the drain looks whether the running requests have ended


class ServerStopping(Exception):
    """A request still running when the drain limit passed."""


class Stop:
    """The app's side of the stop: `stopping` (new requests and /health answer 503), and the cut,
    made once the drain limit has passed: every wait inside `cuttable()` ends with ServerStopping."""

    def __init__(self, drain_s: float, profile: str = "the profile"):
        self.drain_s, self.profile = drain_s, profile
        self.stopping = self.is_cut = False
        self.admission = None  # the app's Admission (build_app sets it): its waiters are turned away
        self._waits: set[asyncio.Timeout] = set()

    @classmethod
    def from_deployment(cls, deployment) -> "Stop":
        drain = deployment.serving_setting("drain_timeout_s", "the speech server lets its streams finish that long "
                                                              "when it stops")
        return cls(float(drain), deployment.profile)

    @property
    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.drain_s))

    def refusal(self) -> Overloaded:
        return Overloaded("serving.drain_timeout_s", f"the server is stopping (profile {self.profile}); "
                                                     f"retry after {self.retry_after_s} s", self.retry_after_s)

    def cut_error(self) -> ServerStopping:
        return ServerStopping(f"the server stopped: this stream was still running after serving.drain_timeout_s "
                              f"{self.drain_s:g} s")

    @contextlib.asynccontextmanager
    async def cuttable(self):
        """Around one wait of a running request (its slot, its next chunk): raises ServerStopping
        once the cut is made. The wait is cancelled in its own task, as asyncio.timeout cancels
        (the cut reschedules the timeout to now), so whatever it awaited unwinds as it would for a
        client that left."""
        if self.is_cut:
            raise self.cut_error()
        timeout = asyncio.timeout(None)
        try:
            async with timeout:
                self._waits.add(timeout)
                try:
                    yield
                finally:
                    self._waits.discard(timeout)
        except TimeoutError:
            if timeout.expired():
                raise self.cut_error() from None
            raise

    def begin(self) -> None:
        """On the event loop: from now on every new request, and every waiter, is refused."""
        self.stopping = True
        if self.admission is not None:
            self.admission.refuse_all(self.refusal)

    def cut(self) -> None:
        """On the event loop: every wait inside `cuttable()`, now and later, ends with ServerStopping."""
        self.is_cut = True
        now = asyncio.get_running_loop().time()
        for timeout in self._waits:
            timeout.reschedule(now)


class GracefulServer(uvicorn.Server):
    """uvicorn's server whose first signal drains (`Stop`) before uvicorn's own shutdown, and whose
    signal is not raised again after the stop (uvicorn does, so SIGTERM's default action would
    end the process with 143)."""

    def __init__(self, config: uvicorn.Config, stop: Stop):
        super().__init__(config)
        self.stop = stop
        self.loop: asyncio.AbstractEventLoop | None = None
        self.drainer: asyncio.Task | None = None

    async def serve(self, sockets=None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig, frame) -> None:  # a signal handler, or a call from another thread
        if self.stop.stopping or not self.started or self.loop is None:
            self.force_exit = self.stop.stopping  # the second signal: at once
            self.should_exit = True
            return
        self.stop.stopping = True
        self.loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self.drainer = self.loop.create_task(self.drain())

    def running(self) -> int:
        return len(self.server_state.tasks)  # the requests in flight (uvicorn's one task each)

    async def drain(self) -> None:
        stop, loop = self.stop, asyncio.get_running_loop()
        stop.begin()
        logger.info("stopping: new requests are answered 503; %d running get serving.drain_timeout_s %g s",
                    self.running(), stop.drain_s)
        deadline = loop.time() + stop.drain_s
        while self.running() and loop.time() < deadline:
            await asyncio.sleep(POLL_S)
        if self.running():
            logger.warning("stopping: %d requests still running after serving.drain_timeout_s %g s are cut",
                           self.running(), stop.drain_s)
            stop.cut()
            grace = loop.time() + CUT_GRACE_S
            while self.running() and loop.time() < grace:
                await asyncio.sleep(POLL_S)
        self.should_exit = True
