"""The talker's pace: the steps it makes a second, read from the rows the server takes.

One talker step makes one row (one 40 ms codec frame) for every running request, so a stream
plays in real time only while the talker makes at least REALTIME_STEPS_PER_SECOND steps a
second. The server sees a request's rows as the engine's outputs reach it
(reference/serve/audio.py: a `Meter` per request, streamed or whole); one output may carry
several rows (vLLM's stream_interval > 1, or rows that waited for a busy event loop).

A request's rate is its rows over its last `window_s` of arrivals: from an anchor arrival (the
newest one at least `window_s` before its last arrival, else its first) to its last arrival,
counting the rows after the anchor. Both ends sit on arrivals, so rows in batches read exactly:
10 rows every 0.4 s are 25 a second wherever the window falls. Not measured:
- the first arrival's rows: they follow the prompt's prefill (and vLLM's queue), and only mark
  where the request's measurement starts;
- a request measured over less than half a window (too few steps to tell);
- rows taken late: when the request's source was held by its consumer (a slow client, the codec
  stage's in-flight limit) longer than it then waited for the engine, its rows had waited in
  vLLM's queue and their arrival says nothing of when they were made; its measurement starts
  over at that arrival;
- a request without rows for more than a window whose source has not waited for them that long
  (held by its consumer: old news).
One whose source has waited that long reads as its rows over the time from its anchor to now: a
talker that stalls drags the rate of every request waiting on it towards 0.

The pace is the fastest measured request's rate: every running request gets one row a step, so
one that reads slower is held back by its own reader; the slowest would take a slow client for a
slow talker. None while no request is measured.

Cost: O(1) amortized per arrival (a request keeps about a window of arrivals); reading the pace is
O(running requests). `on_rows` (the admission's wake, reference/serve/admission.py) is called when
rows arrive, at most once per `notify_s` of the clock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

REALTIME_STEPS_PER_SECOND = 25  # 24 kHz audio, 960 samples a codec frame


class Pace:
    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = 1.0, notify_s: float = 0.04):
        self.clock, self.window_s, self.notify_s = clock, window_s, notify_s
        self.on_rows: Callable[[], None] | None = None
        self._meters: set[Meter] = set()
        self._notified = -float("inf")

    def meter(self) -> Meter:
        """A request's meter, from the moment its source asks for its first rows; `end()` it."""
        meter = Meter(self)
        self._meters.add(meter)
        return meter

    def steps_per_second(self) -> float | None:
        now = self.clock()
        return max((rate for m in self._meters if (rate := m.rate(now)) is not None), default=None)

    def _arrived(self, now: float) -> None:
        if self.on_rows is not None and now - self._notified >= self.notify_s:
            self._notified = now
            self.on_rows()


class Meter:
    """One request's row arrivals. Its source calls `rows(n)` for each output and `asking()` when
    it is ready for the next one (at once for a whole request; a stream after its consumer took
    the frames)."""

    def __init__(self, pace: Pace):
        self.pace = pace
        self._arrivals: deque[tuple[float, int]] = deque()  # (time, rows counted since the start), anchor first
        self._asked: float | None = pace.clock()  # since when its source waits for rows; None: held by its consumer
        self._last: float | None = None  # the latest arrival

    def rows(self, n: int) -> None:
        now, asked, last = self.pace.clock(), self._asked, self._last
        late = asked is None or (last is not None and asked - last > now - asked)
        if last is None or late:
            self._arrivals = deque([(now, 0)])  # starts (over) here: these rows are not counted
        else:
            self._arrivals.append((now, self._arrivals[-1][1] + n))
            while len(self._arrivals) > 1 and self._arrivals[1][0] <= now - self.pace.window_s:
                self._arrivals.popleft()  # the first left is the anchor
        self._last, self._asked = now, None
        self.pace._arrived(now)

    def asking(self) -> None:
        self._asked = self.pace.clock()

    def end(self) -> None:
        self.pace._meters.discard(self)

    def rate(self, now: float) -> float | None:
        """Steps a second, or None while not measured."""
        if len(self._arrivals) < 2:
            return None
        window = self.pace.window_s
        (start, first), (end, last) = self._arrivals[0], self._arrivals[-1]
        if now - end > window:  # no rows for a window
            if self._asked is None or now - self._asked <= window:
                return None  # held by its consumer: its rows tell nothing of the talker now
            end = now  # its source waits for rows that do not come: the talker stalls
        if end - start < window / 2:
            return None
        return (last - first) / (end - start)
