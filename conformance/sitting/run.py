"""A sitting, step by step: the bundles installed, then the plan's steps in order; a server is booted, its work
items run against it, and it is stopped before the next step. Before each step the budget is asked whether its
worst case fits (conformance/sitting/budget.py); a step that does not fit is not run, and later ones that fit
still are. A bundle that fails stops the sitting; so does a work item that fails with `on_failure: stop`; any
other failure is recorded and the sitting goes on. Whatever ends the sitting (its last step, a failure, an
interruption, an error of its own), every server it started is stopped and the results are written."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Callable

from conformance.sitting import bundles, commands, groups, health
from conformance.sitting.budget import Budget
from conformance.sitting.interrupts import Interrupted, Interrupts
from conformance.sitting.placeholders import Unfilled, names
from conformance.sitting.plan import Bundle, Plan, Run, Server
from conformance.sitting.results import FAILED, OK, OUT_OF_BUDGET, SKIPPED, Record, Results


def unfilled(missing: Unfilled) -> str:
    return f"{{{missing.name}}} has no value: the step that yields it did not run ok"


def base_values(plan: Plan, repo: Path, folder: Path) -> dict[str, str]:
    """The placeholders known before anything runs."""
    return {"repo": str(repo), "results": str(folder), "python": sys.executable,
            **{f"bundle.{b.name}": str(b.target) for b in plan.bundles}}


def bundle_command(bundle: Bundle) -> str:
    return f"check {bundle.source} against {bundle.sums}; pip install --no-index --no-deps --no-compile --target " \
           f"{bundle.target} <its wheels{f' matching {list(bundle.only)}' if bundle.only else ''}" \
           f"{f' but {list(bundle.exclude)}' if bundle.exclude else ''}>"


def planned_records(plan: Plan, values: dict[str, str]) -> list[Record]:
    records = [Record(b.id, "bundle", b.timeout_s, bundle_command(b)) for b in plan.bundles]
    for step in plan.steps:
        if isinstance(step, Server):
            server_values = values | step.values
            records.append(Record(step.id, "server", step.boot_timeout_s, commands.shown(step, server_values)))
            records += [Record(r.id, "run", r.timeout_s, commands.shown(r, server_values)) for r in step.steps]
        else:
            records.append(Record(step.id, "run", step.timeout_s, commands.shown(step, values)))
    return records


class Sitting:
    def __init__(self, plan: Plan, folder: Path, repo: Path, budget: Budget | None = None,
                 interrupts: Interrupts | None = None, say: Callable[[str], None] | None = None):
        self.plan, self.folder, self.repo = plan, folder, repo
        self.say = say or (lambda line: print(line, flush=True))
        self.budget = budget or Budget(plan.budget_s, plan.reserve_s)
        self.interrupts = interrupts
        self.values = base_values(plan, repo, folder)
        self.targets = {b.name: b.target for b in plan.bundles}
        self.results = Results(folder, plan.path, plan.budget_s, plan.reserve_s, planned_records(plan, self.values))
        self.live: list[tuple[Server, subprocess.Popen, Record]] = []  # servers started and not yet stopped
        self.halted = ""  # why every step not yet run is skipped
        self.current: Record | None = None  # the step running

    # --- the sitting ------------------------------------------------------------------------------------

    def run(self) -> Results:
        interrupted = ""
        self.results.write()
        try:
            for bundle in self.plan.bundles:
                self._bundle(bundle)
            for step in self.plan.steps:
                self._server(step) if isinstance(step, Server) else self._item(step, None)
        except Interrupted as interruption:
            interrupted = interruption.name
            self.halted = f"the sitting was interrupted ({interrupted})"
            if self.current is not None:
                self._finish(self.current, FAILED, f"interrupted ({interrupted})")
        except Exception as error:  # the tool's own (a full disk, say): recorded, and the sitting ends as any other
            traceback.print_exc()
            self.halted = f"the sitting stopped on an error of its own: {error!r}"
            if self.current is not None:
                self._finish(self.current, FAILED, self.halted)
        finally:
            with self.interrupts.shield() if self.interrupts else contextlib.nullcontext():
                self._stop_servers()
                if not interrupted and self.interrupts and self.interrupts.received:
                    interrupted = self.interrupts.received[0]  # arrived while stopping
                for record in self.results.records.values():
                    if not record.status:
                        record.status, record.reason = SKIPPED, self.halted or "not reached"
                counts = self.results.counts()
                self.results.state = (f"interrupted ({interrupted})" if interrupted else
                                      "complete" if counts[OK] == len(self.results.records) else "incomplete")
                self.results.elapsed_s = self.budget.elapsed()
                self.results.write()
        return self.results

    def _stop_servers(self) -> None:
        while self.live:
            server, process, record = self.live[-1]
            record.stop = groups.stop(process, signal.SIGTERM, server.stop_grace_s, leader_only=True)
            self.live.pop()
            self.say(f"{record.id}: stopped: {record.stop}")

    # --- one step ------------------------------------------------------------------------------------------

    def _skip(self, record: Record, status: str, reason: str) -> None:
        record.status, record.reason = status, reason
        self.say(f"{record.id}: {status}: {reason}")
        self.results.write()

    def _begin(self, record: Record) -> Path:
        self.current = record
        record.started_s = round(self.budget.elapsed(), 1)
        record.log = f"{record.id}.log"
        self.say(f"[{record.started_s:6.0f} s] {record.id}: {record.command}")
        self.results.write()
        return self.folder / record.log

    def _finish(self, record: Record, status: str, reason: str = "") -> None:
        record.status, record.reason = status, reason
        if record.duration_s is None:
            record.duration_s = round(self.budget.elapsed() - record.started_s, 1)
        self.current = None
        first_line = f": {reason.splitlines()[0]}" if reason else ""
        self.say(f"[{self.budget.elapsed():6.0f} s] {record.id}: {status}{first_line}")
        self.results.write()

    def _make_dir(self, step: Run | Server) -> None:
        """The step's {dir}, where it uses one."""
        texts = [*(step.command or ()), getattr(step, "shell", None) or "", *step.env.values()]
        if any("dir" in names(t) for t in texts):
            (self.folder / step.id).mkdir(parents=True, exist_ok=True)

    def _bundle(self, bundle: Bundle) -> None:
        record = self.results.records[bundle.id]
        if self.halted:
            return self._skip(record, SKIPPED, self.halted)
        if not self.budget.fits(bundle.worst_s):
            self.halted = f"bundle {bundle.name} was not installed"
            return self._skip(record, OUT_OF_BUDGET, self.budget.shortfall(bundle.worst_s))
        log = self._begin(record)
        try:
            done = bundles.install(bundle, log, dict(os.environ), bundle.timeout_s)
        except bundles.BundleError as error:
            self.halted = f"bundle {bundle.name} was not installed"
            return self._finish(record, FAILED, str(error))
        self._finish(record, OK, done)

    def _item(self, run: Run, server: tuple[Server, subprocess.Popen] | None) -> None:
        record = self.results.records[run.id]
        if self.halted:
            return self._skip(record, SKIPPED, self.halted)
        if server and server[1].poll() is not None:
            return self._skip(record, SKIPPED, f"its server {server[0].name} had exited (exit {server[1].returncode})")
        values = self.values | (server[0].values if server else {}) | {"dir": str(self.folder / run.id)}
        try:
            words = commands.words(run, values)
            env = commands.environment(self.plan, run, values, self.targets, self.repo)
        except Unfilled as missing:
            return self._skip(record, SKIPPED, unfilled(missing))
        record.command = commands.shown(run, values)
        worst = run.worst_s + (server[0].stop_grace_s if server else 0)
        if not self.budget.fits(worst):
            return self._skip(record, OUT_OF_BUDGET, self.budget.shortfall(worst))
        self._make_dir(run)
        log = self._begin(record)
        stdout = self.folder / f"{run.id}.out" if run.yields else None
        outcome = groups.run_bounded(words, env, self.repo, log, run.timeout_s, run.stop_signal, run.grace_s, stdout)
        record.exit_code, record.stop = outcome.exit_code, outcome.stopped
        if outcome.timed_out:
            status, reason = FAILED, f"stopped at its limit of {run.timeout_s:g} s"
        elif outcome.exit_code != 0:
            status, reason = FAILED, f"exit {outcome.exit_code}"
        else:
            status, reason = OK, ""
        if status == OK and run.yields:
            lines = [line for line in stdout.read_text(errors="replace").splitlines() if line.strip()]
            if lines:
                self.values[run.yields] = lines[-1].strip()
                reason = f"{{{run.yields}}} = {lines[-1].strip()}"
            else:
                status, reason = FAILED, f"printed nothing for {{{run.yields}}}"
        if status == FAILED and run.on_failure == "stop":
            self.halted = f"{run.id} failed (on_failure: stop)"
        self._finish(record, status, reason)

    def _server(self, server: Server) -> None:
        record = self.results.records[server.id]
        items = [self.results.records[r.id] for r in server.steps]
        if self.halted:
            for r in [record, *items]:
                self._skip(r, SKIPPED, self.halted)
            return
        values = self.values | server.values | {"dir": str(self.folder / server.id)}
        try:
            words = commands.words(server, values)
            env = commands.environment(self.plan, server, values, self.targets, self.repo)
        except Unfilled as missing:
            self._skip(record, SKIPPED, unfilled(missing))
            for r in items:
                self._skip(r, SKIPPED, f"its server {server.name} was not booted")
            return
        record.command = commands.shown(server, values)
        if not self.budget.fits(server.boot_worst_s):
            self._skip(record, OUT_OF_BUDGET, self.budget.shortfall(server.boot_worst_s)
                       + " (its boot, its first work item and its stop)")
            for r in items:
                self._skip(r, OUT_OF_BUDGET, f"its server {server.name} was not booted (out of budget)")
            return
        self._make_dir(server)
        log = self._begin(record)
        process = groups.start(words, env, self.repo, log)
        record.pid = process.pid
        self.live.append((server, process, record))
        try:
            record.duration_s = round(health.wait_healthy(server.health, process, server.boot_timeout_s, log), 1)
        except health.NotHealthy as error:
            self._finish(record, FAILED, str(error))
            self._stop_servers()
            for r in items:
                self._skip(r, SKIPPED, f"its server {server.name} did not become healthy")
            return
        self._finish(record, OK, f"healthy after {record.duration_s:g} s")
        for run in server.steps:
            self._item(run, (server, process))
        if process.poll() is not None:
            record.status, record.reason = FAILED, f"exited by itself (exit {process.returncode}) before its stop"
        self._stop_servers()
        self.results.write()
