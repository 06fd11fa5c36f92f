"""Waiting for a booted server: healthy once GET on its health URL answers 200 (any proxy the environment
names is bypassed). The wait fails (NotHealthy) when the server exits first or the deadline passes, with the
last lines of its log in the message."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

POLL_S = 0.5
TAIL_LINES = 30
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class NotHealthy(Exception):
    pass


def log_tail(log: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of `log` (read from its last 64 KiB)."""
    try:
        with log.open("rb") as f:
            f.seek(max(f.seek(0, 2) - (64 << 10), 0))
            text = f.read().decode(errors="replace")
    except OSError as error:
        return f"(no log: {error})"
    return "\n".join(text.splitlines()[-lines:])


def answers(url: str, timeout_s: float) -> bool:
    try:
        with _DIRECT.open(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):  # refused, reset, timed out, HTTP 503 (HTTPError)
        return False


def wait_healthy(url: str, process: subprocess.Popen, deadline_s: float, log: Path) -> float:
    """Seconds until `url` answered 200; raises NotHealthy when `process` exits first or deadline_s pass."""
    started = time.monotonic()
    while True:
        if answers(url, timeout_s=min(2.0, max(deadline_s - (time.monotonic() - started), 0.1))):
            return time.monotonic() - started
        took = time.monotonic() - started
        if process.poll() is not None:
            raise NotHealthy(f"exited (exit {process.returncode}) after {took:.1f} s, before {url} answered 200; "
                             f"the last lines of {log.name}:\n{log_tail(log)}")
        if took >= deadline_s:
            raise NotHealthy(f"not healthy after {deadline_s:g} s ({url} never answered 200); "
                             f"the last lines of {log.name}:\n{log_tail(log)}")
        time.sleep(min(POLL_S, max(deadline_s - took, 0)))
