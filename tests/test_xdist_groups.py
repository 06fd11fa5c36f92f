"""The suite runs in pytest-xdist workers with --dist loadgroup (tox -e cpu-dummy): a test file's
checks must stay together in one worker, so that its module fixtures (engines, a benchmark run)
are built once. pytest 9.2 renamed the node id attribute xdist's loadgroup rewrites, which split
every group silently: tox.ini pins pytest, and this check fails if a group is split again."""

import configparser
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance.gate.run import check_id, suite_args

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parent.parent


def test_a_files_checks_share_one_worker_and_one_module_fixture(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("project_conftest", {str(ROOT / "conftest.py")!r})
        project = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(project)
        pytest_collection_modifyitems = project.pytest_collection_modifyitems
        pytest_addoption = project.pytest_addoption
        pytest_configure = project.pytest_configure
    """))
    (tmp_path / "test_grouped.py").write_text(textwrap.dedent(f"""
        import os, time
        import pytest

        @pytest.fixture(scope="module")
        def built():
            with open({str(tmp_path / "setups")!r}, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            time.sleep(0.5)  # long enough for the other worker to ask for work

        @pytest.mark.parametrize("i", range(6))
        def test_uses_it(built, i):
            pass
    """))
    for name in "abc":
        (tmp_path / f"test_other_{name}.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
                          "--rootdir", str(tmp_path), str(tmp_path)], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    setups = (tmp_path / "setups").read_text().split()
    assert len(setups) == 1, f"the module fixture was built in {len(setups)} workers: pytest-xdist split the file's group"


def test_a_verdict_names_a_check_without_its_xdist_group():
    assert check_id("conformance/test_a.py::t[v1-x]@conformance.test_a:v1") == "conformance/test_a.py::t[v1-x]"
    assert check_id("tests/test_b.py::t@tests.test_b") == "tests/test_b.py::t"
    assert check_id("tests/test_b.py::t[a@b]") == "tests/test_b.py::t[a@b]"


@pytest.mark.parametrize("env, platform, chosen", [("cpu-dummy", "cpu", "dummy"), ("gpu", "cuda", "dummy"),
                                                   ("gpu-real", "cuda", "real")])
def test_the_gate_runs_the_selection_and_the_workers_tox_runs(env, platform, chosen):
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    command = tox[f"testenv:{env}"]["commands"]
    args = suite_args(platform, chosen)
    marker, workers = args[1], " ".join(args[2:])
    assert f"-m {marker} " in command.replace('"', "") and workers in command, \
        f"tox -e {env} runs {command!r}, the gate {marker!r} {workers}"
