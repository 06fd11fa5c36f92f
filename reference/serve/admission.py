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
"""

from __future__ import annotations

import asyncio
import math
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

    def __init__(self, semaphore: asyncio.Semaphore):
        self._semaphore: asyncio.Semaphore | None = semaphore

    def release(self) -> None:
        if self._semaphore is not None:
            self._semaphore.release()
            self._semaphore = None


class Admission:
    def __init__(self, limits: ServingLimits, metrics: ServeMetrics):
        self.limits, self.metrics = limits, metrics
        self._slots = asyncio.Semaphore(limits.slots)
        self.waiting = 0

    @property
    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.limits.max_queue_wait_s))

    def _refuse(self, limit: str, message: str) -> Overloaded:
        self.metrics.rejected.labels(limit).inc()
        return Overloaded(f"serving.{limit}", f"the server is at its limit: {message} (profile {self.limits.profile}); "
                                              f"retry after {self.retry_after_s} s", self.retry_after_s)

    async def admit(self) -> Ticket:
        """A slot, at once or after waiting in line; raises Overloaded past either limit."""
        limits = self.limits
        if self._slots.locked() and self.waiting >= limits.max_waiting_requests:
            raise self._refuse("max_waiting_requests", f"all {limits.slots} talker slots are busy and "
                                                       f"{self.waiting} requests wait for one "
                                                       f"(serving.max_waiting_requests {limits.max_waiting_requests})")
        self.waiting += 1
        self.metrics.queue_depth.set(self.waiting)
        try:
            await asyncio.wait_for(self._slots.acquire(), limits.max_queue_wait_s)
        except TimeoutError:
            raise self._refuse("max_queue_wait_s", f"no talker slot of {limits.slots} came free within "
                                                   f"serving.max_queue_wait_s {limits.max_queue_wait_s:g} s") from None
        finally:
            self.waiting -= 1
            self.metrics.queue_depth.set(self.waiting)
        return Ticket(self._slots)
