"""Admission: which speech requests the server hands the engine, and which it turns away.

The talker runs stage 0's `max_num_seqs` requests at once. A request past those waits here (not
in vLLM's unbounded queue) for a slot, in arrival order; the profile's `serving` section bounds
the wait and, where it sets one, the talker's pace (reference/deploy/profiles/default.yaml):

- `max_waiting_requests`: a request that finds that many already waiting is turned away at once;
- `max_queue_wait_s`: a request still waiting after that long is turned away;
- `min_realtime_factor` (absent or null: no pace gate): while a request runs and the talker's
  measured pace (reference/serve/pace.py) is under the factor x 25 steps a second (25: a stream
  plays in real time), a free slot is not taken: requests wait in the same line, under the same
  two bounds, until the pace recovers. The gate is read when rows arrive (at most once per
  `Pace.notify_s`), when a slot frees, when a request arrives, and once per `Pace.window_s` while
  a request is held and nothing else happens (never in a loop of its own). A request that finds
  nothing running is let in whatever the pace, and so is one while no running request is measured
  yet. The gate reads the pace as measured: the requests it lets in within one window are not in
  that reading yet, so a burst can take the pace under the floor; the factor's margin above 1 is
  for that.

Turned away is `Overloaded`: 503 with Retry-After and an error naming the limit, sent before any
audio byte (the server sends its status only once the first audio is ready, reference/serve/app.py).
Retry-After is `max_queue_wait_s` rounded up: by then every request waiting now has started or
been turned away. A request whose wait runs out while a slot is free was held by the pace: its
error names `serving.min_realtime_factor`, with the measured pace and the floor. A slot is held
from admission until the request's engine work ends (its last row, an error or an abort);
`Ticket.release` may be called more than once.

The counts are exact whatever the arrivals' timing: `running` and the line of waiters' futures
are changed only by synchronous code on the event loop, so a decision never waits for a task to
resume. A slot the gate lets go goes straight to the oldest waiter's future and counts as running
from that moment (never also as waiting); a waiter cancelled (its client left) or timed out leaves
the line at once, and one cancelled after its slot was handed over gives that slot on. Hence
running <= slots and waiting <= max_waiting_requests at every instant, and while anyone waits
every slot is running, unless the pace gate holds them. `refuse_all` turns away every waiter, and
every later arrival, with one error (the server's dead engine).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from reference.serve.metrics import ServeMetrics
from reference.serve.pace import REALTIME_STEPS_PER_SECOND, Pace


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
    min_realtime_factor: float | None = None  # None: no pace gate

    @property
    def min_steps_per_second(self) -> float | None:
        """The pace gate's floor: the factor x 25 steps a second (None: no gate)."""
        factor = self.min_realtime_factor
        return None if factor is None else factor * REALTIME_STEPS_PER_SECOND

    @classmethod
    def from_deployment(cls, deployment) -> "ServingLimits":
        """The talker's max_num_seqs and the resolved `serving` section (both queue limits
        required; min_realtime_factor optional)."""
        waiting, wait_s = (deployment.serving_setting(k, "the speech server bounds its queue by it")
                           for k in ("max_waiting_requests", "max_queue_wait_s"))
        factor = (deployment.config.get("serving") or {}).get("min_realtime_factor")
        return cls(int(deployment.engine_kwargs["max_num_seqs"]), int(waiting), float(wait_s), deployment.profile,
                   None if factor is None else float(factor))


class Ticket:
    """A slot held; `release()` gives it back (once, however often it is called)."""

    def __init__(self, admission: Admission):
        self._admission: Admission | None = admission

    def release(self) -> None:
        if self._admission is not None:
            admission, self._admission = self._admission, None
            admission._hand_over()


class Admission:
    def __init__(self, limits: ServingLimits, metrics: ServeMetrics, pace: Pace | None = None):
        if limits.min_realtime_factor is not None and pace is None:
            raise ValueError(f"{limits.profile}: serving.min_realtime_factor needs the talker's pace: "
                             "Admission(limits, metrics, speaker.pace)")
        self.limits, self.metrics, self.pace = limits, metrics, pace
        self.running = 0  # slots held by tickets, handed-over ones included
        self._line: deque[asyncio.Future] = deque()  # the waiters' futures, oldest first
        self._refusal: Callable[[], BaseException] | None = None
        self._recheck: asyncio.TimerHandle | None = None  # the pace gate's next look while nothing happens
        metrics.queue_depth.set_function(lambda: self.waiting)  # read at scrape time: never stale
        if limits.min_realtime_factor is not None:
            pace.on_rows = self._let_in

    @property
    def waiting(self) -> int:
        """Futures still pending: a waiter cancelled in this pass has left the line already, though
        its task removes the future only when it resumes."""
        return sum(not future.done() for future in self._line)

    @property
    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.limits.max_queue_wait_s))

    def _pace(self) -> float | None:
        """The talker's measured pace, where the gate is on (None: off, or nothing measured)."""
        return None if self.limits.min_realtime_factor is None else self.pace.steps_per_second()

    def _gate_open(self, pace: float | None) -> bool:
        """Whether a free slot may be taken at this pace: yes while nothing runs or nothing is measured."""
        floor = self.limits.min_steps_per_second
        return floor is None or self.running == 0 or pace is None or pace >= floor

    def _slow(self, pace: float | None) -> str:
        limits = self.limits
        measured = "an unmeasured pace" if pace is None else f"{pace:.1f} steps/s"
        return (f"the talker makes {measured}, under the floor of {limits.min_steps_per_second:g} steps/s "
                f"(serving.min_realtime_factor {limits.min_realtime_factor:g} x {REALTIME_STEPS_PER_SECOND}, "
                "the steps a second of a stream in real time)")

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
        self._let_in()  # the line first: nobody passes it
        if self.running < limits.slots and not self.waiting and self._gate_open(self._pace()):
            self.running += 1
            return Ticket(self)
        if self.waiting >= limits.max_waiting_requests:
            busy = (f"all {limits.slots} talker slots are busy" if self.running >= limits.slots
                    else self._slow(self._pace()))
            raise self._refuse("max_waiting_requests", f"{busy} and {self.waiting} requests wait for one "
                                                       f"(serving.max_waiting_requests {limits.max_waiting_requests})")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._line.append(future)
        self._look_again()
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

    def _let_in(self) -> None:
        """Free slots to the oldest waiters while the gate is open (one reading of the pace: those
        let in now are not in it yet); each runs from now on."""
        if not self._line or self.running >= self.limits.slots:
            return
        pace = self._pace()
        while self._line and self.running < self.limits.slots and self._gate_open(pace):
            future = self._line.popleft()
            if not future.done():
                self.running += 1
                future.set_result(Ticket(self))
        self._look_again()

    def _look_again(self) -> None:
        """While the pace holds a waiter, one look a window later, should no rows or slot come first
        (a request held by its reader stops being measured without any row arriving)."""
        if self._recheck is None and self.waiting and self.running < self.limits.slots:
            self._recheck = asyncio.get_running_loop().call_later(self.pace.window_s, self._looked_again)

    def _looked_again(self) -> None:
        self._recheck = None
        self._let_in()

    def _expire(self, future: asyncio.Future) -> None:
        self._let_in()  # the gate may have opened since its last look
        if future.done():  # let in, refused or cancelled first
            return
        self._line.remove(future)
        limits = self.limits
        if self.running < limits.slots:  # a slot is free: the pace held it
            future.set_exception(self._refuse("min_realtime_factor", f"{self._slow(self._pace())}; this request "
                                                                     f"waited serving.max_queue_wait_s "
                                                                     f"{limits.max_queue_wait_s:g} s for it to recover"))
        else:
            future.set_exception(self._refuse("max_queue_wait_s", f"no talker slot of {limits.slots} came free "
                                                                  f"within serving.max_queue_wait_s "
                                                                  f"{limits.max_queue_wait_s:g} s"))

    def _hand_over(self) -> None:
        """A slot given back: to the oldest waiter the gate lets in, else free."""
        self.running -= 1
        self._let_in()

    def refuse_all(self, error: Callable[[], BaseException]) -> None:
        """Every waiter, and every later arrival, gets `error()` (a new exception each)."""
        self._refusal = error
        while self._line:
            future = self._line.popleft()
            if not future.done():
                future.set_exception(error())
