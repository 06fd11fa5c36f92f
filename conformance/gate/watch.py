"""The gate run's watchdog: a verdict is written whatever hangs (conformance/gate/run.py).

Two limits, both optional:
- a per-test limit (`--test-timeout S`): a check that runs longer (setup, call and teardown
  together; a group's first check includes its engine boot) is hung. The process running it (a
  pytest-xdist worker) kills every process under it, vLLM's engines, which makes a check waiting
  on them fail; if the check has not returned GRACE_S later, SIGALRM interrupts it (CheckHung in
  its wait); if even that does not end it, the worker dumps its stacks and exits, and pytest-xdist
  goes on with the group's other checks in a new worker. The check's
  outcome is `error` with `"timeout": true` and a reason naming the limit and its group; a later
  attempt to run it (pytest-xdist re-queues a crashed worker's work) fails at once instead of
  hanging again.
- a deadline for the whole run (`--deadline S`): when it comes, the controller writes the verdict
  from what has finished: checks still running (cut short, not hung) and checks not started are
  `notrun`, and the verdict says `"complete": false`. It then kills every process under it and
  exits. `python -m conformance.gate --rest VERDICT` runs the `notrun` checks and merges.

The watch folder ($GATE_WATCH_DIR) carries, per process, the check it is running and since when,
and one file per hung check; workers find it through the environment they inherit.
"""

from __future__ import annotations

import faulthandler
import hashlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

DIR_ENV, TIMEOUT_ENV = "GATE_WATCH_DIR", "GATE_TEST_TIMEOUT"
GRACE_S = float(os.environ.get("GATE_TEST_GRACE", 30))  # after the engines are killed, for the check to return
POLL_S = 1.0


class CheckHung(Exception):
    """Raised in a check that passed the per-test limit and did not end when its engines were killed."""


def _write(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _hung_name(nodeid: str) -> str:
    return f"hung-{hashlib.sha1(nodeid.encode()).hexdigest()[:16]}.json"


def kill_children(pid: int | None = None) -> int:
    """SIGKILL every process under `pid` (default: this one); returns how many."""
    try:
        children = psutil.Process(pid or os.getpid()).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    return len(children)


def hung_checks(folder: Path) -> dict[str, dict]:
    """nodeid -> {seconds, limit, group, worker, how} of every check a worker found hung."""
    found = {}
    for path in sorted(folder.glob("hung-*.json")):
        record = json.loads(path.read_text())
        found[record["nodeid"]] = record
    return found


def running_checks(folder: Path) -> dict[str, dict]:
    """nodeid -> {pid, start, worker} of every check a process has started and not finished."""
    running = {}
    for path in folder.glob("run-*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if record.get("nodeid"):
            running[record["nodeid"]] = record
    return running


class TestWatch:
    """pytest plugin, in every process that runs checks (each xdist worker, or the single process):
    says what runs, and ends a check that outlives the per-test limit."""

    def __init__(self, folder: Path, limit: float | None, worker: str):
        self.folder, self.limit, self.worker = folder, limit, worker
        self.state = folder / f"run-{worker}.json"
        self.current: tuple[str, float, str] | None = None  # nodeid, start, group
        self.lock = threading.Lock()
        self.hung_before = False
        self.given_up: str | None = None  # the check this watch last ended
        self.interrupting: str | None = None
        if limit:
            signal.signal(signal.SIGALRM, self._interrupt)  # from the main thread, where checks run
            threading.Thread(target=self._watch, name="gate-test-watch", daemon=True).start()

    def pytest_runtest_logstart(self, nodeid):
        with self.lock:
            self.current = (nodeid, time.time(), "")
        _write(self.state, {"pid": os.getpid(), "worker": self.worker, "nodeid": nodeid, "start": time.time()})
        self.hung_before = (self.folder / _hung_name(nodeid)).exists()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        marker = item.get_closest_marker("xdist_group")
        if marker and marker.args and self.current and self.current[0] == item.nodeid:
            with self.lock:
                self.current = (item.nodeid, self.current[1], str(marker.args[0]))
        if self.hung_before:
            pytest.fail(f"not run again: it hung earlier in this gate run (per-test limit {self.limit:.0f} s)",
                        pytrace=False)

    def pytest_runtest_logfinish(self, nodeid):
        with self.lock:
            self.current = None
        _write(self.state, {"pid": os.getpid(), "worker": self.worker, "nodeid": None})

    def _returned(self, nodeid: str) -> bool:
        """Whether the check ended within GRACE_S."""
        deadline = time.time() + GRACE_S
        while time.time() < deadline:
            time.sleep(POLL_S)
            with self.lock:
                if self.current is None or self.current[0] != nodeid:
                    return True
        return False

    def _interrupt(self, signum, frame):
        if self.interrupting and self.current and self.current[0] == self.interrupting:
            self.interrupting = None
            raise CheckHung(f"hung: passed the gate's per-test limit of {self.limit:.0f} s")

    def _watch(self) -> None:
        while True:
            time.sleep(POLL_S)
            with self.lock:
                current = self.current
            if current is None or current[0] == self.given_up or time.time() - current[1] <= self.limit:
                continue
            nodeid, start, group = current
            self.given_up = nodeid
            record = {"nodeid": nodeid, "seconds": round(time.time() - start), "limit": self.limit,
                      "group": group, "worker": self.worker, "how": "its engines were killed"}
            _write(self.folder / _hung_name(nodeid), record)
            killed = kill_children()
            print(f"\ngate: {nodeid} passed the per-test limit of {self.limit:.0f} s: killed {killed} "
                  f"processes under worker {self.worker}", file=sys.stderr, flush=True)
            if self._returned(nodeid):
                continue
            # Still there: interrupt the check's own wait (as pytest-timeout's signal method does).
            record["how"] = "its engines were killed, then the check was interrupted (SIGALRM)"
            _write(self.folder / _hung_name(nodeid), record)
            self.interrupting = nodeid
            signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)
            if self._returned(nodeid) or self.worker == "main":  # main: no worker to give up, the deadline ends it
                continue
            record["how"] = (f"neither killing its engines nor SIGALRM ended it within {2 * GRACE_S:.0f} s: "
                             "its worker exited")
            _write(self.folder / _hung_name(nodeid), record)
            print(f"gate: {nodeid} still hung; stacks of worker {self.worker}:", file=sys.stderr, flush=True)
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            kill_children()
            os._exit(70)


def register(config) -> None:
    """Called from gate_run's plugin in every process: adds TestWatch where checks run."""
    folder = os.environ.get(DIR_ENV)
    if not folder:
        return
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None and config.getoption("numprocesses", None):
        return  # the xdist controller runs no checks
    limit = float(os.environ.get(TIMEOUT_ENV) or 0) or None
    worker = workerinput["workerid"] if workerinput else "main"
    config.pluginmanager.register(TestWatch(Path(folder), limit, worker), "gate-test-watch")


def pytest_configure(config):
    register(config)


class Deadline:
    """In the process that writes the verdict: at `seconds` after start, `on_expire()` (which writes
    the verdict of what finished and returns an exit code), then every process under this one is
    killed and this one exits with that code."""

    def __init__(self, seconds: float, on_expire):
        self.seconds, self.on_expire = seconds, on_expire
        self.timer = threading.Timer(seconds, self._expire)
        self.timer.daemon = True

    def start(self) -> None:
        self.timer.start()

    def cancel(self) -> None:
        self.timer.cancel()

    def _expire(self) -> None:
        print(f"\ngate: the run's deadline ({self.seconds:.0f} s) came: writing the verdict of what finished",
              file=sys.stderr, flush=True)
        try:
            code = self.on_expire()
        finally:
            kill_children()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
