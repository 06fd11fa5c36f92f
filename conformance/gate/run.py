"""One upgrade-gate run inside the environment of the vLLM under test: every check's outcome and
every measured figure, written as a verdict (JSON). conformance/gate/__main__.py starts it and diffs.

    python -m conformance.gate.run OUT.json [--deadline S] [--test-timeout S] [--rest VERDICT [--again PATH]...] [pytest args...]

The suite is the one of the platform's job: on a CPU `pytest -m "not gpu"` (tox -e cpu-dummy), on
a CUDA machine `pytest -m "gpu or engine or every_platform" -n 8 --dist loadgroup` (tox -e gpu); with
HIGGS_WEIGHTS=real the real-weight checks of the platform (tox -e cpu-real, gpu-real). A test
reports a figure with `record_property("figure:<name>", {"value": v, "unit": u, "tolerance": t})`.
The verdict names its weights (`weights`: "dummy" or "real: <path>, <revision or folder>") and how
many real-weight checks ran (`real_weight_checks_run`); format 1 verdicts predate both and ran
dummy weights.

`--test-timeout` and `--deadline` (conformance/gate/watch.py) make the run end with a verdict
whatever hangs: a hung check is an `error` with `"timeout": true`, naming the limit and its group;
at the deadline the checks not started, and those it cut short, are `notrun` and the verdict says
`"complete": false`. `--rest VERDICT` runs that verdict's `notrun` checks and writes the two runs
merged (format 3); with `--again PATH` (a test file or folder, repeatable) the checks under PATH run
again too, their new outcomes replacing the earlier ones: an area whose tools a later sitting
brought (the GPU's quality area, docs/gate.md). Both runs must be of one vLLM on one platform.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from conformance import weights
from conformance.gate import diff as gate_diff, watch as gate_watch
from conformance.environment import CPU_WORKERS, GPU_REAL_WORKERS, GPU_WORKERS

ROOT = Path(__file__).resolve().parents[2]
FORMAT = 3  # 3: `complete`, `runs`, `notrun` and `timeout` outcomes (gate_watch.py)
FAILING = ("failed", "error")
XDIST_GROUP_SUFFIX = re.compile(r"@[\w.:-]+$")
MAX_REASON = 400
DEADLINE_EXIT = 4  # the verdict was written at the deadline: `notrun` checks are left (--rest)


def _reason(report) -> str:
    if report.skipped:
        text = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return text.removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)  # the exception's message, where pytest has one
    lines = str(report.longrepr).strip().splitlines()
    text = " ".join((crash.message if crash is not None else lines[-1] if lines else "").split())
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + "..."


def check_id(nodeid: str) -> str:
    """A check's name in a verdict: its pytest node id without the `@group` that pytest-xdist's
    --dist loadgroup appends, so that verdicts of runs with and without workers compare."""
    return XDIST_GROUP_SUFFIX.sub("", nodeid)


class VerdictCollector:
    """pytest plugin: the outcome (passed, failed, error, skipped, xfailed, xpassed) and reason
    of every check, and the figures the checks record."""

    def __init__(self):
        self.checks: dict[str, dict] = {}
        self.figures: dict[str, dict] = {}
        self.weights: str | None = None  # dummy or real, once the session started (conftest.py)
        self.real_checks_ran = 0
        self.collected: set[str] = set()  # every selected check, as the workers (or this process) collected it

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.collected.update(check_id(i) for i in ids)

    def pytest_collection_finish(self, session):
        self.collected.update(check_id(item.nodeid) for item in session.items)

    @pytest.hookimpl(trylast=True)  # after conftest.py's, which refuses a real-weights run without them
    def pytest_configure(self, config):
        self.weights = weights.mode(config.getoption("weights", None))

    def _set(self, nodeid: str, outcome: str, reason: str = "") -> None:
        self.checks[check_id(nodeid)] = {"outcome": outcome, "reason": reason} if reason else {"outcome": outcome}

    def pytest_collectreport(self, report):
        if report.failed:  # a module that no longer imports is a failing check, not a missing one
            self._set(report.nodeid or "<collection>", "error", _reason(report))

    def pytest_runtest_logreport(self, report):
        self.real_checks_ran += weights.ran_real_check(report)
        # A figure counts whatever the check's outcome: a failing or timed-out check keeps what it measured.
        for name, value in getattr(report, "user_properties", ()):
            if isinstance(name, str) and name.startswith("figure:"):
                self.figures[f"{check_id(report.nodeid)}::{name.removeprefix('figure:')}"] = dict(value)
        if hasattr(report, "wasxfail"):
            if report.when == "call" or report.skipped:
                self._set(report.nodeid, "xfailed" if report.skipped else "xpassed", report.wasxfail)
            return
        if report.when == "setup":
            if report.failed:
                self._set(report.nodeid, "error", _reason(report))
            elif report.skipped:
                self._set(report.nodeid, "skipped", _reason(report))
        elif report.when == "call":
            self._set(report.nodeid, report.outcome, _reason(report) if report.failed or report.skipped else "")
        elif report.failed and self.checks.get(check_id(report.nodeid), {}).get("outcome") not in FAILING:
            self._set(report.nodeid, "error", "teardown: " + _reason(report))


def suite_args(platform_name: str, chosen: str = "dummy") -> list[str]:
    """tox.ini's selection: cpu-dummy, gpu, cpu-real or gpu-real."""
    if platform_name == "cuda":
        if chosen == "real":
            return ["-m", "real_weights", *GPU_REAL_WORKERS]
        return ["-m", "gpu or engine or every_platform", *GPU_WORKERS]
    return ["-m", "real_weights and not gpu" if chosen == "real" else "not gpu", *CPU_WORKERS]


def detect_platform() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def finished(collector: VerdictCollector, watch_dir: Path | None, deadline: bool) -> tuple[dict, bool]:
    """The checks of the run, hung ones and (at the deadline) unstarted ones marked: (checks, complete)."""
    checks = dict(collector.checks)
    if watch_dir is not None:
        hung = gate_watch.hung_checks(watch_dir)
        running = gate_watch.running_checks(watch_dir) if deadline else {}
        for nodeid, record in hung.items():
            checks[check_id(nodeid)] = {
                "outcome": "error", "timeout": True,
                "reason": f"timed out: ran {record['seconds']} s, past the per-test limit of {record['limit']:.0f} s "
                          f"(group {record['group'] or '?'}, worker {record['worker']}); {record['how']}"}
        # Cut by the deadline, not hung (that is the per-test limit's call): left for --rest.
        for nodeid, record in running.items():
            if nodeid not in hung:
                checks[check_id(nodeid)] = {
                    "outcome": "notrun",
                    "reason": f"cut by the run's deadline ({time.time() - record['start']:.0f} s in, worker "
                              f"{record['worker']}): --rest runs it again"}
    why = "not started before the run's deadline" if deadline else "not started: the run ended early (see pytest_exit)"
    for check in collector.collected - set(checks):
        checks[check] = {"outcome": "notrun", "reason": why}
    collected = bool(collector.collected)  # False: the deadline came before the checks were collected
    left = any(result["outcome"] == "notrun" for result in checks.values())
    return dict(sorted(checks.items())), collected and not left


def count(checks: dict[str, dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for check in checks.values():
        counts[check["outcome"]] = counts.get(check["outcome"], 0) + 1
    return dict(sorted(counts.items()))


def _figure_check(name: str) -> str:
    """The check a verdict figure belongs to: its name without the last `::figure`."""
    return name.rsplit("::", 1)[0]


def merge(earlier: dict, later: dict) -> dict:
    """A verdict and the run of its `notrun` checks (and of those asked for `--again`), as one verdict.
    What the later run ran replaces the earlier outcome and figures of those checks; every other check
    (failed, errors and timeouts included) keeps its outcome and its figures. Complete when the later
    run was and no check is left `notrun`."""
    checks = {**earlier["checks"], **later["checks"]}
    kept = {n: f for n, f in earlier.get("figures", {}).items() if _figure_check(n) not in later["checks"]}
    runs = earlier.get("runs") or [{"seconds": earlier["seconds"], "pytest_exit": earlier["pytest_exit"]}]
    # The earlier verdict's own keys (its suite's pytest_args, conformance.gate.speed's `speed`) stay; this run's
    # arguments go with its entry in `runs`.
    return {**earlier, **later, "pytest_args": earlier["pytest_args"],
            "complete": later.get("complete", True) and not any(r["outcome"] == "notrun" for r in checks.values()),
            "checks": dict(sorted(checks.items())), "counts": count(checks),
            "figures": dict(sorted({**kept, **later.get("figures", {})}.items())),
            "seconds": earlier["seconds"] + later["seconds"],
            "pytest_exit": max(earlier["pytest_exit"], later["pytest_exit"]),
            "real_weight_checks_run": earlier.get("real_weight_checks_run", 0) + later.get("real_weight_checks_run", 0),
            "runs": [*runs, {"seconds": later["seconds"], "pytest_exit": later["pytest_exit"],
                             "pytest_args": later["pytest_args"]}]}


def parse_gate_options(argv: list[str]) -> tuple[dict, list[str]]:
    """gate_run's own options (before the pytest arguments): deadline, test_timeout, rest, again."""
    options: dict = {"deadline": None, "test_timeout": None, "rest": None, "again": []}
    names = {"--deadline": ("deadline", float), "--test-timeout": ("test_timeout", float), "--rest": ("rest", Path),
             "--again": ("again", str)}
    argv = list(argv)
    while argv and argv[0] in names:
        if len(argv) < 2:
            raise SystemExit(f"gate_run: {argv[0]} needs a value")
        key, kind = names[argv.pop(0)]
        if key == "again":
            options["again"].append(argv.pop(0))
        else:
            options[key] = kind(argv.pop(0))
    if options["again"] and options["rest"] is None:
        raise SystemExit("gate_run: --again PATH runs checks again into a verdict: give it with --rest VERDICT")
    return options, argv


def run(out: Path, extra: list[str], deadline: float | None = None, test_timeout: float | None = None,
        rest: Path | None = None, again: list[str] = ()) -> int:
    from reference import compat

    try:
        version = compat.check_supported_version()
    except compat.UnsupportedVLLMVersion as error:
        print(f"gate: {error}", file=sys.stderr)
        return 3
    import torch

    try:
        chosen = weights.mode()
    except ValueError as error:
        print(f"gate: {error}", file=sys.stderr)
        return 2
    earlier = json.loads(rest.read_text()) if rest else None
    notrun = sorted(c for c, r in earlier["checks"].items() if r["outcome"] == "notrun") if earlier else []
    only = notrun + list(again)
    if earlier is not None and not only:
        if not earlier.get("complete", True):
            print(f"gate: {rest} names no check to run: its run ended before the checks were collected; run the "
                  "gate again without --rest", file=sys.stderr)
        else:
            print(f"gate: {rest} has no check left to run (--again PATH runs a file or folder of checks again)",
                  file=sys.stderr)
        return 2
    platform_name = detect_platform()
    if earlier is not None:
        ran = {"platform": earlier["platform"], "vllm": earlier["vllm"], "weights": weights.identity(gate_diff.weights(earlier))}
        here = {"platform": platform_name, "vllm": version, "weights": weights.identity(weights.describe(chosen))}
        if ran != here:
            print(f"gate: {rest} ran {ran}, this run would be {here}: --rest completes a verdict with runs of the "
                  "same vLLM, platform and weights only", file=sys.stderr)
            return 2
    collector = VerdictCollector()
    args = ["-q", "-p", "no:cacheprovider", *suite_args(platform_name, chosen), *extra]
    watch_dir = None
    if deadline or test_timeout:
        watch_dir = out.parent / f".watch-{os.getpid()}"
        shutil.rmtree(watch_dir, ignore_errors=True)
        watch_dir.mkdir(parents=True)
        os.environ[gate_watch.DIR_ENV] = str(watch_dir)
        os.environ[gate_watch.TIMEOUT_ENV] = str(test_timeout or "")
        args[3:3] = ["-p", "conformance.gate.watch"]
    args += only
    start = time.monotonic()
    os.chdir(ROOT)

    def write(code: int, at_deadline: bool) -> int:
        checks, complete = finished(collector, watch_dir, at_deadline)
        verdict = {
            "format": FORMAT,
            "platform": platform_name,
            "vllm": version,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "known_differences": [d.name for d in compat.DIFFERENCES if d.applies(version)],
            "weights": weights.describe(collector.weights or chosen),
            "real_weight_checks_run": collector.real_checks_ran,
            "pytest_args": [a for a in args[3:] if a not in notrun],
            "pytest_exit": code,
            "seconds": round(time.monotonic() - start),
            "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "complete": complete,
            "limits": {"deadline_s": deadline, "test_timeout_s": test_timeout},
            "counts": count(checks),
            "checks": checks,
            "figures": dict(sorted(collector.figures.items())),
        }
        if earlier is not None:
            verdict = merge(earlier, verdict)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(verdict, indent=1, sort_keys=False) + "\n")
        return code

    def at_deadline() -> int:
        code = write(DEADLINE_EXIT, True)
        shutil.rmtree(watch_dir, ignore_errors=True)
        return code

    watchdog = gate_watch.Deadline(deadline, at_deadline) if deadline else None
    if watchdog:
        watchdog.start()
    code = int(pytest.main(args, plugins=[collector]))
    if watchdog:
        watchdog.cancel()
    if collector.weights is None:  # the session did not start (a refused real-weights run: pytest said why)
        return code
    code = write(code, False)
    if watch_dir is not None:
        shutil.rmtree(watch_dir, ignore_errors=True)
    return code


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m conformance.gate.run OUT.json [pytest args...]")
    options, pytest_args = parse_gate_options(sys.argv[2:])
    sys.exit(run(Path(sys.argv[1]).resolve(), pytest_args, **options))
