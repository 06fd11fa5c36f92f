"""Admission: which speech requests the server hands the engine, and which it turns away.

The talker runs stage 0's `max_num_seqs` requests at once. A request past those waits here (not
in vLLM's unbounded queue) for a slot, in arrival order; the profile's `serving` section bounds
the wait (reference/deploy/profiles/default.yaml):

- `max_waiting_requests`: a request that finds that many already waiting is turned away at once;
- `max_queue_wait_s`: a request still waiting after that long is turned away.

Turned away is `Overloaded`: 503 with Retry-After and an error naming the limit, sent before any
audio byte (the server sends its status only once the first audio is ready, reference/serve/app.py).
Retry-After is `max_queue_wait_s` rounded up: by then every request waiting now has started or
been turned away. A slot is held from admission until the request's engine work ends (its last
row, an error or an abort); `Ticket.release` may be called more than once.

The counts are exact whatever the arrivals' timing: `running` and the line of waiters' futures
are changed only by synchronous code on the event loop, so a decision never waits for a task to
resume. A freed slot goes straight to the oldest waiter's future and counts as running from that
moment (never also as waiting); a waiter cancelled (its client left) or timed out leaves the line
at once, and one cancelled after its slot was handed over gives that slot on. Hence
running <= slots and waiting <= max_waiting_requests at every instant, and while anyone waits
every slot is running. `refuse_all` turns away every waiter, and every later arrival, with one
error (the server's dead engine).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from reference.serve.metrics import ServeMetrics


class Overloaded(Exception):
    """A request the server turned away: the limit it met (a `serving.*` key), the message and
    the Retry-After seconds."""

    def __init__(self, limit: str, message: str, retry_after_s: int):
        super().__init__(message)
        self.limit, self.message, self.retry_after_s = limit, message, retry_after_s

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": "server_overloaded", "param": self.limit, "code": 503}}


@dataclass(frozen=True)
class ServingLimits:
    slots: int  # the talker's max_num_seqs
    max_waiting_requests: int
    max_queue_wait_s: float
    profile: str = "the profile"

    @classmethod
    def from_deployment(cls, deployment) -> "ServingLimits":
        """The talker's max_num_seqs and the resolved `serving` section (both required)."""
        serving = deployment.config.get("serving") or {}
        missing = [k for k in ("max_waiting_requests", "max_queue_wait_s") if k not in serving]
        if missing:
            raise ValueError(f"{deployment.profile}: serving.{missing[0]} is not set: the speech server bounds its "
                             "queue by it (reference/deploy/profiles/default.yaml sets both serving limits)")
        return cls(int(deployment.engine_kwargs["max_num_seqs"]), int(serving["max_waiting_requests"]),
                   float(serving["max_queue_wait_s"]), deployment.profile)


class Ticket:
    """A slot held; `release()` gives it back (once, however often it is called)."""

    def __init__(self, admission: Admission):
        self._admission: Admission | None = admission

    def release(self) -> None:
        if self._admission is not None:
            admission, self._admission = self._admission, None
            admission._hand_over()


class Admission:
    def __init__(self, limits: ServingLimits, metrics: ServeMetrics):
        self.limits, self.metrics = limits, metrics
        self.running = 0  # slots held by tickets, handed-over ones included
        self._line: deque[asyncio.Future] = deque()  # the waiters' futures, oldest first
        self._refusal: Callable[[], BaseException] | None = None
        metrics.queue_depth.set_function(lambda: self.waiting)  # read at scrape time: never stale

    @property
    def waiting(self) -> int:
        """Futures still pending: a waiter cancelled in this pass has left the line already, though
        its task removes the future only when it resumes."""
        return sum(not future.done() for future in self._line)

    @property
    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.limits.max_queue_wait_s))

    def _refuse(self, limit: str, message: str) -> Overloaded:
        self.metrics.rejected.labels(limit).inc()
        return Overloaded(f"serving.{limit}", f"the server is at its limit: {message} (profile {self.limits.profile}); "
                                              f"retry after {self.retry_after_s} s", self.retry_after_s)

    async def admit(self) -> Ticket:
        """A slot, at once or after waiting in line; raises Overloaded past either limit, or
        `refuse_all`'s error."""
        limits = self.limits
        if self._refusal is not None:
            raise self._refusal()
        if self.running < limits.slots:  # nobody waits while a slot is free
            self.running += 1
            return Ticket(self)
        if self.waiting >= limits.max_waiting_requests:
            raise self._refuse("max_waiting_requests", f"all {limits.slots} talker slots are busy and "
                                                       f"{self.waiting} requests wait for one "
                                                       f"(serving.max_waiting_requests {limits.max_waiting_requests})")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._line.append(future)
        timer = loop.call_later(limits.max_queue_wait_s, self._expire, future)
        try:
            return await future
        except asyncio.CancelledError:  # the client left
            if future in self._line:
                self._line.remove(future)
            elif not future.cancelled() and future.exception() is None:
                future.result().release()  # its slot was handed over in the same pass: on to the next
            raise
        finally:
            timer.cancel()

    def _expire(self, future: asyncio.Future) -> None:
        if not future.done():  # still waiting: no slot, refusal or cancellation came first
            self._line.remove(future)
            future.set_exception(self._refuse("max_queue_wait_s", f"no talker slot of {self.limits.slots} came free "
                                                                  f"within serving.max_queue_wait_s "
                                                                  f"{self.limits.max_queue_wait_s:g} s"))

    def _hand_over(self) -> None:
        """A slot given back: to the oldest waiter (it runs from now on), else free."""
        while self._line:
            future = self._line.popleft()
            if not future.done():
                future.set_result(Ticket(self))
                return
        self.running -= 1

    def refuse_all(self, error: Callable[[], BaseException]) -> None:
        """Every waiter, and every later arrival, gets `error()` (a new exception each)."""
        self._refusal = error
        while self._line:
            future = self._line.popleft()
            if not future.done():
                future.set_exception(error())
