"""The main job: run the conformance suite against the installed vLLM and print a per-area report.

    python -m conformance.report [pytest args...]

An area is one conformance module (conformance/test_<area>.py). The report names the vLLM
version, the platform, the runners this platform can run, the weights in use (`dummy`, or
`real: <path>, <revision or folder>` with how many real-weight checks ran: HIGGS_WEIGHTS or
--weights, conftest.py), and per area the passed / failed / skipped counts (and expected failures:
negative controls) with every distinct skip reason and failure, and the lines a check records for
the report (the quality area: scorer, floors, scores per runner, parity, mode). A real-weights run
in which no real-weight check ran is RED.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest

from conformance import weights
from conformance.gate.run import check_id
from conformance.environment import CPU_WORKERS, REAL_CHECKPOINT_ENV

ROOT = Path(__file__).resolve().parent.parent


class AreaCollector:
    def __init__(self):
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.notes: dict[str, set[str]] = defaultdict(set)
        self.lines: dict[str, list[str]] = defaultdict(list)
        self.weights: str | None = None  # dummy or real, once the session started (conftest.py)
        self.real_checks_ran = 0

    @pytest.hookimpl(trylast=True)  # after conftest.py's, which refuses a real-weights run without them
    def pytest_configure(self, config):
        self.weights = weights.mode(config.getoption("weights"))

    @staticmethod
    def _area(nodeid: str) -> str:
        return Path(nodeid.split("::")[0]).stem.removeprefix("test_")

    def pytest_runtest_logreport(self, report):
        area = self._area(report.nodeid)
        self.real_checks_ran += weights.ran_real_check(report)
        # Lines a check adds for the report (`record_property("report", text)`: the quality
        # area's scorer, floors, scores per runner, parity and mode).
        if report.when == "call":
            self.lines[area].extend(value for name, value in report.user_properties if name == "report")
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = report.outcome
            if hasattr(report, "wasxfail"):  # a negative control that failed as it must
                self.counts[area]["expected failures"] += 1
                self.notes[area].add(f"expected failure (negative control): {report.wasxfail}")
                return
            self.counts[area][outcome] += 1
            if report.skipped:
                reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
                self.notes[area].add(f"skipped: {reason.removeprefix('Skipped: ')}")
            elif report.failed:
                message = str(report.longrepr).strip().splitlines()[-1]
                self.notes[area].add(f"FAILED {check_id(report.nodeid).split('::', 1)[-1]}: {message}")


def weights_line(chosen: str, real_checks_ran: int) -> str:
    """The header's weights: `dummy` or `real: <path>, <revision or folder>` (a verdict's `weights`)."""
    if chosen == "real":
        note = f" ({real_checks_ran} real-weight checks ran)"
    else:
        note = f" (higgs_dummy/ checkpoints; real weights: tox -e cpu-real with {REAL_CHECKPOINT_ENV})"
    return f"weights   {weights.describe(chosen)}{note}"


def environment_lines(chosen: str, real_checks_ran: int) -> list[str]:
    import torch
    import vllm

    if torch.cuda.is_available():
        platform, runners = f"cuda ({torch.cuda.get_device_name(0)})", "v1, v2"
    else:
        platform, runners = "cpu", "v1 (V2 needs Triton: no CPU backend)"
    return [
        f"vLLM      {vllm.__version__} (torch {torch.__version__})",
        f"platform  {platform}",
        f"runners   {runners}",
        weights_line(chosen, real_checks_ran),
    ]


def main(args: list[str]) -> int:
    collector = AreaCollector()
    code = pytest.main(["-q", "-p", "no:cacheprovider", *CPU_WORKERS, str(ROOT / "conformance"), *args],
                       plugins=[collector])
    if collector.weights is None:  # the session did not start (a refused real-weights run: pytest said why)
        return int(code)
    print("\n== Higgs Audio v3 conformance report ==")
    for line in environment_lines(collector.weights, collector.real_checks_ran):
        print(line)
    total = defaultdict(int)
    for area in sorted(collector.counts):
        counts = collector.counts[area]
        for k, v in counts.items():
            total[k] += v
        expected = f", expected failures {counts['expected failures']}" if counts["expected failures"] else ""
        print(f"\n[{area}] passed {counts['passed']}, failed {counts['failed']}, skipped {counts['skipped']}{expected}")
        for line in collector.lines[area]:
            print(f"  | {line}")
        for note in sorted(collector.notes[area]):
            print(f"  - {note}")
    verdict = "GREEN" if code == 0 and not total["failed"] else "RED"
    if collector.weights == "real" and not collector.real_checks_ran:
        verdict = "RED (a real-weights run in which no real-weight check ran: all skipped or deselected)"
    print(f"\n{verdict}: passed {total['passed']}, failed {total['failed']}, skipped {total['skipped']}")
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
