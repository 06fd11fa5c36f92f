"""Every phase in a spawned child with its own time limit, so that the run always finishes.

An engine that hangs at boot (seen on the GPU machine: a forked engine start, nine minutes
silent) or a crash that leaves the process unusable cannot be recovered inside the process;
killing a process group can. So each phase (phases.py) runs in a child started with the spawn
method (forking beside a live engine's threads hung: docs/vllm-findings.md) as the leader of its
own process group. The parent prints the child's progress lines, keeps every level as soon as it
arrives, and ends the phase one of four ways:
- ok: the child said "done" (and exited; if its shutdown hangs it is killed after GRACE_S, or at
  its limit if that comes first);
- failed: the child sent a traceback, or exited without a word (its exit code or signal), or the
  plan refused the phase (a profile that does not resolve on this platform);
- timeout: the phase's limit passed; the child and every process under it are killed;
- skipped: the run's --budget could not give the phase MIN_PHASE_S.
A failure's message says what failed, after how long, and the last progress line; the record
keeps the tail of the phase's log (vLLM's own lines). With several GPUs (`Settings.gpus`), one
phase runs on each at a time (CUDA_VISIBLE_DEVICES in the child); without GPUs,
`Settings.cpu_parallel` at a time.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import time
from dataclasses import asdict
from multiprocessing.connection import wait
from pathlib import Path

import psutil

from benchmarks.phases import run_phase
from benchmarks.plan import Phase, Settings

MIN_PHASE_S = 60.0  # a phase needs at least a boot
GRACE_S = 60.0  # after "done", for the engine's shutdown
LOG_TAIL_LINES = 30
KILL_WAIT_S = 5.0  # for killed processes to end


def run_phases(phases: list[Phase], settings: Settings, checkpoint: str, log_dir: Path,
               started: float, say=print, measure=None) -> list[dict]:
    """Runs the phases in order, one per slot at a time; returns one record per phase. `started`:
    the run's time.monotonic() at its start, which the --budget counts from; `measure`: what the
    child measures (phases.measure_phase; tests give a stand-in)."""
    context = multiprocessing.get_context("spawn")
    log_dir.mkdir(parents=True, exist_ok=True)
    records = {p.name: _record(p, log_dir) for p in phases}
    running: dict[str, _Child] = {}
    free = settings.slots

    def elapsed() -> float:
        return time.monotonic() - started

    def finish(record: dict, status: str, message: str | None) -> None:
        record["status"], record["message"] = status, message
        if status != "ok" and Path(record["log"]).exists():
            record["log_tail"] = Path(record["log"]).read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        say(f"[{elapsed():5.0f} s] {record['name']}: {status.upper()}" + (f": {message}" if message else ""))

    def handle(name: str, kind: str, payload) -> None:
        record = records[name]
        if kind == "progress":
            record["last_progress"] = payload
            say(f"[{elapsed():5.0f} s] {name}: {payload}")
        elif kind == "info":
            record.update(payload)
        elif kind in ("e2e", "engine"):
            record[kind].append(payload)
        elif kind == "error" and running[name].ended is not None:  # in the shutdown, all measured
            record["note"] = "after it finished: " + payload.strip().splitlines()[-1]
        elif kind == "error":
            record["traceback"] = payload
            running[name].error = payload.strip().splitlines()[-1]
        if kind in ("done", "error") and running[name].ended is None:
            running[name].ended = time.monotonic()

    def drain(timeout: float) -> None:
        """Handles what the children sent, waiting up to `timeout` for the first message. Each child
        has a pipe of its own: a child that dies mid-message (os._exit, OOM kill) spoils only its own
        (a shared multiprocessing.Queue stayed locked by it, and every other phase went silent)."""
        channels = {child.channel: name for name, child in running.items() if not child.channel.closed}
        for channel in wait(list(channels), timeout):
            try:
                while channel.poll():
                    handle(channels[channel], *channel.recv())
            except (EOFError, OSError, ValueError, pickle.UnpicklingError):  # ended, or ended mid-message
                channel.close()

    pending = []
    for phase in phases:
        if phase.error:
            finish(records[phase.name], "failed", f"not started: {phase.error}")
        else:
            pending.append(phase)
    while pending or running:
        while pending and free:
            phase = pending.pop(0)
            record = records[phase.name]
            left = None if settings.budget is None else settings.budget - elapsed()
            if left is not None and left < MIN_PHASE_S:
                finish(record, "skipped", f"not started: {max(left, 0):.0f} s of the --budget "
                       f"{settings.budget:.0f} s left, a phase needs {MIN_PHASE_S:.0f} s")
                continue
            limit = settings.phase_timeout if left is None else min(settings.phase_timeout, left)
            record["gpu"] = slot = free.pop(0)
            say(f"[{elapsed():5.0f} s] {phase.name}: started" + (f" on GPU {slot}" if slot is not None else "")
                + f", limit {limit:.0f} s, log {record['log']}")
            channel, child_end = context.Pipe(duplex=False)
            process = context.Process(target=run_phase, name=f"bench-{phase.name}",
                                      args=(phase, settings, checkpoint, slot, record["log"], child_end, measure))
            process.start()
            child_end.close()  # the child holds the only writer: its end is the pipe's end
            running[phase.name] = _Child(process, channel, slot, limit)
        drain(1.0)
        for name, child in list(running.items()):
            if not child.process.is_alive():
                drain(0.5)  # whatever it sent before it ended
            outcome = child.outcome(name)
            if outcome is None:
                continue
            _kill_group(child.process.pid)  # the engine's processes too, whatever the outcome
            child.process.join(5)
            child.channel.close()
            record = records[name]
            record["wall_s"] = child.took
            status, message = outcome
            if message and record["last_progress"]:
                message += f"; last progress: {record['last_progress']!r}"
            if child.ended is not None and child.process.exitcode == -signal.SIGKILL:
                record["note"] = f"killed {GRACE_S:.0f} s after it finished: the engine's shutdown hung"
            finish(record, status, message)
            del running[name]
            free.append(child.slot)
    return [records[p.name] for p in phases]


class _Child:
    """A running phase: its process, the pipe it reports on, its slot and limit, and what it has said
    about its end."""

    def __init__(self, process, channel, slot: str | None, limit: float):
        self.process, self.channel, self.slot, self.limit = process, channel, slot, limit
        self.start = time.monotonic()
        self.ended: float | None = None  # when it sent "done" or "error"
        self.error: str | None = None  # the last line of its traceback

    @property
    def took(self) -> float:
        return time.monotonic() - self.start

    def outcome(self, name: str) -> tuple[str, str | None] | None:
        """(status, message) once the phase is over; None while it runs within its limit."""
        alive = self.process.is_alive()
        if self.ended is not None and (not alive or time.monotonic() - self.ended > GRACE_S or self.took > self.limit):
            return ("failed", f"{name} failed after {self.took:.0f} s: {self.error}") if self.error else ("ok", None)
        if not alive:
            return "failed", (f"{name}: its process ended ({_exit(self.process.exitcode)}) after "
                              f"{self.took:.0f} s without finishing")
        if self.took > self.limit:
            return "timeout", (f"{name} timed out: still running after {self.took:.0f} s (limit "
                               f"{self.limit:.0f} s), killed with its engine processes")
        return None


def _record(phase: Phase, log_dir: Path) -> dict:
    return {**asdict(phase), "status": None, "message": None, "last_progress": None,
            "log": str(log_dir / (phase.name.replace("/", "-") + ".log")), "e2e": [], "engine": []}


def _exit(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _kill_group(pid: int) -> None:
    """SIGKILL to the phase's process group and to anything under it that left the group (vLLM's
    engine core and workers stay in it unless they make their own)."""
    try:
        leader = psutil.Process(pid)
        processes = [leader] + leader.children(recursive=True)
    except psutil.NoSuchProcess:
        processes = []
    try:
        os.killpg(pid, signal.SIGKILL)  # the group outlives its leader
    except (ProcessLookupError, PermissionError):
        pass  # no group: the child died before os.setsid, or everything has already ended
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    # SIGKILL is delivered asynchronously: return once each is gone (or a zombie, its parent dead too).
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and not all(map(_ended, processes)):
        time.sleep(0.05)


def _ended(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
