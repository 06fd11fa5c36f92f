"""One upgrade-gate run inside the environment of the vLLM under test: every check's outcome and
every measured figure, written as a verdict (JSON). conformance/tools/gate.py starts it and diffs.

    python -m conformance.tools.gate_run OUT.json [pytest args...]

The suite is the one of the platform's job: on a CPU `pytest -m "not gpu"` (tox -e cpu-dummy), on
a CUDA machine `pytest -m "gpu or engine" -n 4 --dist loadgroup` (tox -e gpu); with
HIGGS_WEIGHTS=real the real-weight checks of the platform (tox -e cpu-real, gpu-real). A test
reports a figure with `record_property("figure:<name>", {"value": v, "unit": u, "tolerance": t})`.
The verdict names its weights (`weights`: "dummy" or "real: <path>, <revision or folder>") and how
many real-weight checks ran (`real_weight_checks_run`); format 1 verdicts predate both and ran
dummy weights.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import pytest

from conformance import weights
from conformance.environment import CPU_WORKERS

ROOT = Path(__file__).resolve().parents[2]
FORMAT = 2
FAILING = ("failed", "error")
XDIST_GROUP_SUFFIX = re.compile(r"@[\w.:-]+$")
MAX_REASON = 400


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

    @pytest.hookimpl(trylast=True)  # after conftest.py's, which refuses a real-weights run without them
    def pytest_configure(self, config):
        self.weights = weights.mode(config.getoption("weights"))

    def _set(self, nodeid: str, outcome: str, reason: str = "") -> None:
        self.checks[check_id(nodeid)] = {"outcome": outcome, "reason": reason} if reason else {"outcome": outcome}

    def pytest_collectreport(self, report):
        if report.failed:  # a module that no longer imports is a failing check, not a missing one
            self._set(report.nodeid or "<collection>", "error", _reason(report))

    def pytest_runtest_logreport(self, report):
        self.real_checks_ran += weights.ran_real_check(report)
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
            self._set(report.nodeid, report.outcome, _reason(report) if report.failed else "")
        elif report.failed and self.checks.get(check_id(report.nodeid), {}).get("outcome") not in FAILING:
            self._set(report.nodeid, "error", "teardown: " + _reason(report))
        for name, value in getattr(report, "user_properties", ()):
            if isinstance(name, str) and name.startswith("figure:"):
                self.figures[f"{check_id(report.nodeid)}::{name.removeprefix('figure:')}"] = dict(value)


def suite_args(platform_name: str, chosen: str = "dummy") -> list[str]:
    """tox.ini's selection: cpu-dummy, gpu, cpu-real or gpu-real."""
    if platform_name == "cuda":
        return ["-m", "real_weights" if chosen == "real" else "gpu or engine", "-n", "4", "--dist", "loadgroup"]
    return ["-m", "real_weights and not gpu" if chosen == "real" else "not gpu", *CPU_WORKERS]


def detect_platform() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def run(out: Path, extra: list[str]) -> int:
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
    platform_name = detect_platform()
    collector = VerdictCollector()
    args = ["-q", "-p", "no:cacheprovider", *suite_args(platform_name, chosen), *extra]
    start = time.monotonic()
    os.chdir(ROOT)
    code = int(pytest.main(args, plugins=[collector]))
    if collector.weights is None:  # the session did not start (a refused real-weights run: pytest said why)
        return code
    counts: dict[str, int] = {}
    for check in collector.checks.values():
        counts[check["outcome"]] = counts.get(check["outcome"], 0) + 1
    verdict = {
        "format": FORMAT,
        "platform": platform_name,
        "vllm": version,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "known_differences": [d.name for d in compat.DIFFERENCES if d.applies(version)],
        "weights": weights.describe(collector.weights),
        "real_weight_checks_run": collector.real_checks_ran,
        "pytest_args": args[3:],
        "pytest_exit": code,
        "seconds": round(time.monotonic() - start),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "counts": dict(sorted(counts.items())),
        "checks": dict(sorted(collector.checks.items())),
        "figures": dict(sorted(collector.figures.items())),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(verdict, indent=1, sort_keys=False) + "\n")
    return code


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m conformance.tools.gate_run OUT.json [pytest args...]")
    sys.exit(run(Path(sys.argv[1]).resolve(), sys.argv[2:]))
