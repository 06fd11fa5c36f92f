"""The processes a sitting starts: each a process group of its own (its leader's pid is the group's id; the
group stays in the sitting's session, so whoever ends the session's processes ends these too), its output to a
log file. A group is gone when no live process is left in it (/proc; a zombie that nobody reaped is not live).

Stopping: a server gets SIGTERM, the process alone (its own shutdown stops what it started); a work item at
its limit gets its stop signal, the whole group (as Ctrl-C in a terminal would). Whatever of the group is still
there `grace_s` later gets SIGKILL, the whole group. A work item that ended by itself and left processes in its
group has them killed at once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.05
KILL_WAIT_S = 5.0  # for SIGKILL to take effect


def start(words: list[str], env: dict[str, str], cwd: Path, log: Path, stdout: Path | None = None) -> subprocess.Popen:
    """`words` started as the leader of a new process group, stdin closed, stderr and stdout appended to `log`
    (stdout to `stdout` instead, where given)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as err, (stdout or log).open("ab") as out:
        return subprocess.Popen(words, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err if stdout else subprocess.STDOUT, process_group=0)


def members(pgid: int) -> list[int]:
    """The live processes of group `pgid`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(process: subprocess.Popen, seconds: float) -> bool:
    """Until the whole group is gone (the leader reaped) or `seconds` pass; True when gone."""
    deadline = time.monotonic() + seconds
    while True:
        process.poll()
        if not members(process.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)


def stop(process: subprocess.Popen, first: signal.Signals, grace_s: float, leader_only: bool) -> str:
    """Ends `process` and its group: `first` (to the leader alone, or to the group), SIGKILL to the group after
    `grace_s`. Returns what it took, for the results."""
    started = time.monotonic()
    if process.poll() is not None and not members(process.pid):
        return f"had ended (exit {process.returncode}), nothing left in its group"
    to = "it" if leader_only and process.poll() is None else "its group"
    if to == "it":
        os.kill(process.pid, first)
    else:
        _signal_group(process.pid, first)
    if _wait_gone(process, grace_s):
        return f"{first.name} to {to}: ended in {time.monotonic() - started:.1f} s (exit {process.returncode})"
    left = len(members(process.pid))
    _signal_group(process.pid, signal.SIGKILL)
    gone = _wait_gone(process, KILL_WAIT_S)
    return (f"{first.name} to {to}, then SIGKILL to its group after {grace_s:g} s ({left} processes left)"
            + ("" if gone else f"; {len(members(process.pid))} still there after SIGKILL"))


def sweep(process: subprocess.Popen) -> str:
    """After a leader ended by itself: SIGKILL to what it left in its group; '' when it left nothing."""
    left = members(process.pid)
    if not left:
        return ""
    _signal_group(process.pid, signal.SIGKILL)
    _wait_gone(process, KILL_WAIT_S)
    return f"SIGKILL to {len(left)} processes it left in its group"


@dataclass(frozen=True)
class Outcome:
    exit_code: int | None
    timed_out: bool
    stopped: str  # what ending it took; '' when it ended by itself and left nothing


def run_bounded(words: list[str], env: dict[str, str], cwd: Path, log: Path, limit_s: float,
                stop_signal: signal.Signals, grace_s: float, stdout: Path | None = None) -> Outcome:
    """A work item: started, waited for up to `limit_s`, then stopped (stop_signal to its group, SIGKILL after
    grace_s). Whatever ends the wait (the limit, an interruption), its group is gone when this returns or raises."""
    process = start(words, env, cwd, log, stdout)
    try:
        try:
            exit_code = process.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            stopped = stop(process, stop_signal, grace_s, leader_only=False)
            return Outcome(process.returncode, True, stopped)
        return Outcome(exit_code, False, sweep(process))
    finally:
        if process.poll() is None or members(process.pid):
            stop(process, stop_signal, grace_s, leader_only=False)
