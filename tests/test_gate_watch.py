"""The gate run's limits (conformance/gate/watch.py) on checks that hang: a verdict is always
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
    return subprocess.run([sys.executable, "-m", "conformance.gate.run", str(out), *args],
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


AREA = '''
import os, pytest

def test_skips_in_its_body():
    pytest.skip("no tool here")

def test_needs_a_tool():
    assert os.environ.get("STAND_IN_TOOL") == "here", "the tool this check needs is not on this host"

def test_other():
    pass
'''


def test_again_runs_an_area_again_into_the_verdict(stand_ins, tmp_path):
    out, path = tmp_path / "verdict.json", stand_ins(AREA)
    first = gate_run(out, path, "-n", "0")
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
    verdict = json.loads(out.read_text())
    before = outcomes(verdict)
    assert before["test_needs_a_tool"]["outcome"] == "failed" and before["test_other"]["outcome"] == "passed"
    assert before["test_skips_in_its_body"] == {"outcome": "skipped", "reason": "no tool here"}
    out.write_text(json.dumps({**verdict, "speed": {"written by": "gate_speed"}}))

    refused = gate_run(out, "--rest", str(out), "-n", "0")  # nothing notrun, nothing asked again
    assert refused.returncode == 2 and "no check left to run" in refused.stderr, refused.stderr

    again = subprocess.run([sys.executable, "-m", "conformance.gate.run", str(out), "--rest", str(out),
                            "--again", f"{path}::test_needs_a_tool", "-n", "0"], cwd=ROOT, capture_output=True,
                           text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), "STAND_IN_TOOL": "here"})
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    merged = json.loads(out.read_text())
    assert outcomes(merged)["test_needs_a_tool"]["outcome"] == "passed" and len(merged["runs"]) == 2
    assert outcomes(merged)["test_other"] == before["test_other"]
    assert merged["counts"] == {"passed": 2, "skipped": 1}
    assert merged["speed"] == {"written by": "gate_speed"}, "the verdict's own keys stay"
    assert merged["pytest_args"] == verdict["pytest_args"] and f"{path}::test_needs_a_tool" in merged["runs"][1]["pytest_args"]


def test_rest_refuses_a_verdict_of_another_vllm(stand_ins, tmp_path):
    out = tmp_path / "verdict.json"
    assert gate_run(out, stand_ins(AREA), "-n", "0").returncode == 1
    verdict = json.loads(out.read_text())
    (tmp_path / "other.json").write_text(json.dumps({**verdict, "vllm": "0.0.1"}))
    run = gate_run(tmp_path / "merged.json", "--rest", str(tmp_path / "other.json"), "--again", stand_ins(AREA), "-n", "0")
    assert run.returncode == 2 and "same vLLM, platform and weights" in run.stderr, run.stderr
    assert not (tmp_path / "merged.json").exists()
