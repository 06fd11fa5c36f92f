"""The gate run's limits (conformance/tools/gate_watch.py) on checks that hang: a verdict is always
written, each hung check is an error naming its limit and group, the rest of its group runs, the
deadline leaves `notrun` checks, and `--rest` runs exactly those. Stand-in checks, no vLLM engine."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKS = '''
import signal, subprocess, time, pytest

@pytest.mark.xdist_group("engine")
def test_engine_first():
    pass

@pytest.mark.xdist_group("engine")
def test_engine_hangs():
    subprocess.run(["sleep", "600"], check=True)  # a child process: ended when the watch kills it

@pytest.mark.xdist_group("engine")
def test_engine_after():
    pass

@pytest.mark.xdist_group("wait")
def test_wait_hangs():
    time.sleep(600)  # no child: interrupted

@pytest.mark.xdist_group("wait")
def test_wait_after():
    pass

@pytest.mark.xdist_group("stuck")
def test_stuck_hangs():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(600)  # nothing ends it but its worker's exit

@pytest.mark.xdist_group("stuck")
def test_stuck_after():
    pass
'''
LONG = '''
import os, time, pytest

@pytest.mark.parametrize("n", range(400))
def test_long(n):
    time.sleep(float(os.environ["STAND_IN_SLEEP"]))  # 1 s: the deadline comes first; 0 in the rest run
'''



def gate_run(out: Path, *args: str, sleep: str = "1") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATE_TEST_GRACE": "2", "STAND_IN_SLEEP": sleep}
    return subprocess.run([sys.executable, "-m", "conformance.tools.gate_run", str(out), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def stand_ins():
    """Writes a file of stand-in checks under the rootdir (the suite's conftest applies); its path."""
    folder = ROOT / ".tox" / f"gate-watch-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)

    def write(text: str) -> str:
        (folder / "test_stand_ins.py").write_text(text)
        return folder.relative_to(ROOT).as_posix() + "/test_stand_ins.py"

    yield write
    shutil.rmtree(folder, ignore_errors=True)


def outcomes(verdict: dict) -> dict[str, dict]:
    return {name.split("::")[1]: result for name, result in verdict["checks"].items()}


def test_each_hung_check_is_an_error_naming_its_group_and_the_group_goes_on(stand_ins, tmp_path):
    out = tmp_path / "verdict.json"
    run = gate_run(out, "--test-timeout", "5", stand_ins(CHECKS), "-n", "3")
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    verdict = json.loads(out.read_text())
    checks = outcomes(verdict)
    assert verdict["complete"] is True and verdict["limits"]["test_timeout_s"] == 5
    for hung, group, how in [("test_engine_hangs", "engine", "its engines were killed"),
                             ("test_wait_hangs", "wait", "interrupted (SIGALRM)"),
                             ("test_stuck_hangs", "stuck", "its worker exited")]:
        assert checks[hung]["outcome"] == "error" and checks[hung]["timeout"] is True, checks[hung]
        assert f"per-test limit of 5 s (group {group}" in checks[hung]["reason"] and how in checks[hung]["reason"]
    for other in ("test_engine_first", "test_engine_after", "test_wait_after", "test_stuck_after"):
        assert checks[other]["outcome"] == "passed", (other, checks[other])


@pytest.mark.slow  # the deadline is wall time from the run's start
def test_the_deadline_writes_the_verdict_and_rest_runs_what_was_left(stand_ins, tmp_path):
    out = tmp_path / "verdict.json"
    run = gate_run(out, "--deadline", "30", stand_ins(LONG), "-n", "1")
    assert run.returncode == 4, run.stdout[-3000:] + run.stderr[-3000:]
    verdict = json.loads(out.read_text())
    assert verdict["complete"] is False and verdict["seconds"] < 45
    long = {name: result["outcome"] for name, result in outcomes(verdict).items()}
    if not long:  # the worker had not collected the checks by the deadline: a verdict all the same
        pytest.skip("the pytest-xdist worker took over 30 s to start on this machine: --rest not exercised")
    assert set(long.values()) <= {"passed", "notrun"} and "notrun" in long.values(), long  # a cut check is no error
    assert verdict["counts"]["notrun"] == list(long.values()).count("notrun")
    cut = [r["reason"] for r in verdict["checks"].values() if r.get("reason", "").startswith("cut by the run's deadline")]
    assert len(cut) <= 1, cut  # one worker: at most the check it was running

    run = gate_run(out, "--rest", str(out), "--deadline", "200", "-n", "1", sleep="0")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    merged = json.loads(out.read_text())
    assert merged["complete"] is True and "notrun" not in merged["counts"]
    assert len(merged["runs"]) == 2 and merged["checks"].keys() == verdict["checks"].keys()
    for name, result in verdict["checks"].items():
        expected = "passed" if result["outcome"] == "notrun" else result["outcome"]
        assert merged["checks"][name]["outcome"] == expected, name
