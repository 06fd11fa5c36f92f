"""The benchmark's phase isolation (benchmarks/isolation.py) with stand-in phases, no engine: a
phase that finishes, one that raises, one whose process dies, one that hangs with a process of its
own (as an engine core would), one the plan refused, and phases left out by the budget. The four
run at once: the one that dies must not silence the others (each reports on a pipe of its own)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import psutil
import pytest

from benchmarks.isolation import run_phases
from benchmarks.plan import Phase, Settings

pytestmark = pytest.mark.cpu


async def stand_in(phase, settings, checkpoint, send) -> None:
    """What each stand-in phase does is its profile's name."""
    send("progress", "engine booted in 0 s")
    send("info", {"boot_s": 0.0})
    send("engine", {"sampling": "greedy", "concurrency": 1, "ms_per_step": 1.0})
    if phase.profile == "raises":
        raise RuntimeError("the engine refused the request")
    if phase.profile == "dies":
        os._exit(3)
    if phase.profile == "hangs":
        sleeper = subprocess.Popen(["sleep", "600"])  # stays in the phase's process group
        send("progress", f"level 2 started, helper pid {sleeper.pid}")
        await asyncio.sleep(600)


def test_each_phase_ends_and_the_run_goes_on(tmp_path):
    phases = [Phase(name, "talker", name, runner="v1") for name in ("finishes", "raises", "dies", "hangs")]
    phases.append(Phase("refused", "talker", "refused", error="profile 'refused' does not resolve on cpu"))
    settings = Settings(platform="cpu", phase_timeout=20.0, cpu_parallel=4)
    start = time.monotonic()
    records = {r["name"]: r for r in run_phases(phases, settings, "unused", tmp_path, start,
                                                 say=lambda line: None, measure=stand_in)}
    assert time.monotonic() - start < 60
    assert records["finishes"]["status"] == "ok" and records["finishes"]["engine"][0]["ms_per_step"] == 1.0
    assert records["raises"]["status"] == "failed"
    assert "RuntimeError: the engine refused the request" in records["raises"]["message"]
    assert records["raises"]["engine"], "levels reported before the failure are kept"
    assert records["dies"]["status"] == "failed" and "exit code 3" in records["dies"]["message"]
    hung = records["hangs"]
    assert hung["status"] == "timeout" and "limit 20 s" in hung["message"]
    assert "last progress: 'level 2 started" in hung["message"]
    helper = int(hung["last_progress"].rsplit(" ", 1)[1])
    assert not psutil.pid_exists(helper) or psutil.Process(helper).status() == psutil.STATUS_ZOMBIE, \
        "the hung phase's own process is killed with it"
    assert records["refused"]["status"] == "failed" and "does not resolve" in records["refused"]["message"]


def test_the_budget_skips_what_does_not_fit(tmp_path):
    phases = [Phase("first", "talker", "finishes", runner="v1"), Phase("second", "bare", "finishes", runner="v1")]
    settings = Settings(platform="cpu", budget=30.0)  # less than a phase needs
    records = run_phases(phases, settings, "unused", tmp_path, time.monotonic(), say=lambda line: None,
                         measure=stand_in)
    assert [r["status"] for r in records] == ["skipped", "skipped"]
    assert "--budget 30 s" in records[0]["message"]
