"""SIGINT, SIGTERM and SIGHUP during a sitting: the first raises Interrupted where the sitting is (so it stops
what it started and writes its results); any later one is noted and ignored, so that the stops finish. While
the sitting stops its servers and writes its results (`shield`), the first one too is only noted."""

from __future__ import annotations

import contextlib
import signal

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """Not an Exception: nothing on the way catches it by mistake."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.name = signal.Signals(signum).name


class Interrupts:
    """The signals received; `shield()` holds the first one back (noted, not raised) while the sitting stops what
    it started and writes its results."""

    def __init__(self):
        self.received: list[str] = []
        self.shielded = False

    def handle(self, signum, frame) -> None:
        self.received.append(signal.Signals(signum).name)
        if len(self.received) == 1 and not self.shielded:
            raise Interrupted(signum)

    @contextlib.contextmanager
    def shield(self):
        self.shielded = True
        try:
            yield
        finally:
            self.shielded = False


@contextlib.contextmanager
def interruptible():
    """Interrupts for the time of the `with`, the earlier handlers restored after."""
    interrupts = Interrupts()
    previous = {s: signal.signal(s, interrupts.handle) for s in SIGNALS}
    try:
        yield interrupts
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
