"""The offline scorers are optional outside the CPU job: a host without them (the GPU machine's
bundle) still collects every quality module, and the quality checks skip naming what to install
(seen: vLLM 0.33.0's GPU verdict had two collection errors, "No module named 'jiwer'")."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCORERS = ("jiwer", "faster_whisper", "resemblyzer")
# A pytest plugin that makes the scorers' packages unimportable, as on a host that lacks them.
WITHOUT_SCORERS = f'''
import importlib.abc, importlib.util, sys

BLOCKED = {SCORERS!r}


class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)


sys.meta_path.insert(0, Absent())
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: None if name.split(".")[0] in BLOCKED else _find_spec(name, package)
'''


@pytest.mark.cpu
def test_a_host_without_the_scorers_collects_the_quality_modules_and_skips_their_checks(tmp_path):
    (tmp_path / "without_scorers.py").write_text(WITHOUT_SCORERS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "without_scorers", "-p", "no:cacheprovider", "-q", "-rs",
         "-m", "gpu or engine or every_platform", "conformance/quality", "tests/test_quality_units.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and " error" not in out, out[-3000:]  # no collection error
    assert "needs the offline scorers (faster_whisper, jiwer, resemblyzer missing)" in out, out[-3000:]
