"""Dummy or real weights (conformance/weights.py, conftest.py): the refusal to start a real-weights run
without its checkpoint, the `weights` of a verdict, and the failure of a real-weights run in which
no real-weight check ran."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import report, weights
from conformance.environment import REAL_CHECKPOINT_ENV
from conformance.gate import run as gate_run_module
from higgs_dummy.cache import cached_checkpoint
from reference.talker import config as talker_config

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parent.parent


def _env(**values) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (REAL_CHECKPOINT_ENV, weights.MODE_ENV, "PYTHONPATH")}
    return {**env, **values}


def check(*args, **env) -> subprocess.CompletedProcess:
    """`python -m conformance.weights` as toxfile.py runs it: no site-packages (-S), from the checkout."""
    return subprocess.run([sys.executable, "-S", "-m", "conformance.weights", *args], cwd=ROOT, env=_env(**env),
                          capture_output=True, text=True, timeout=60)


def _not_a_checkpoint(tmp_path, what):
    folder = tmp_path / "ckpt"
    if what == "missing":
        return folder
    if what == "file":
        folder.write_text("x")
        return folder
    shutil.copytree(cached_checkpoint("tiny", 0), folder)
    if what == "no_config":
        (folder / "config.json").unlink()
    elif what == "other_model":
        config = json.loads((folder / "config.json").read_text())
        other = config | {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}
        (folder / "config.json").write_text(json.dumps(other))
    elif what == "broken_config":
        (folder / "config.json").write_text("{")
    elif what == "no_weights":
        for f in folder.glob("*.safetensors"):
            f.unlink()
    elif what == "no_tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (folder / name).unlink(missing_ok=True)
    return folder


def test_a_real_run_without_the_variable_is_refused_with_exit_2_naming_it_and_the_checkpoint():
    out = check("real")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("refusing to start: real weights (HIGGS_WEIGHTS=real): HIGGS_V3_CHECKPOINT is not set")
    assert "a local copy of bosonai/higgs-audio-v3-tts-4b" in out.stderr and "tox -e cpu-dummy" in out.stderr


def test_an_empty_variable_is_refused_like_an_unset_one():
    out = check("real", HIGGS_V3_CHECKPOINT=" ")
    assert out.returncode == 2 and "HIGGS_V3_CHECKPOINT is not set" in out.stderr


@pytest.mark.parametrize(("what", "says"), [
    ("missing", "does not exist"),
    ("file", "is a file, not a checkpoint folder"),
    ("no_config", "has no config.json, so it is not a checkpoint folder"),
    ("broken_config", "does not read as JSON"),
    ("other_model", "is not a Higgs Audio v3 checkpoint: config.json has model_type 'qwen3'"),
    ("no_weights", "has no *.safetensors weights"),
    ("no_tokenizer", "has no tokenizer.json or tokenizer_config.json"),
])
def test_a_folder_that_is_not_a_checkpoint_is_refused_naming_the_folder(tmp_path, what, says):
    folder = _not_a_checkpoint(tmp_path, what)
    out = check("real", HIGGS_V3_CHECKPOINT=str(folder))
    assert out.returncode == 2, out.stderr
    assert f"HIGGS_V3_CHECKPOINT={folder}" in out.stderr or str(folder / "config.json") in out.stderr
    assert says in out.stderr and "bosonai/higgs-audio-v3-tts-4b" in out.stderr


def test_a_checkpoint_folder_is_accepted_and_named_by_its_folder():
    folder = cached_checkpoint("tiny", 0)
    out = check("real", HIGGS_V3_CHECKPOINT=str(folder))
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == f"weights: real: {folder.resolve()}, folder {folder.name}\n"


def test_the_mode_comes_from_the_variable_and_dummy_needs_nothing():
    assert check(HIGGS_WEIGHTS="real").returncode == 2
    assert (check().returncode, check().stdout) == (0, "weights: dummy\n")
    out = check(HIGGS_WEIGHTS="fake")
    assert out.returncode == 2 and "HIGGS_WEIGHTS='fake' (or --weights): expected one of dummy, real" in out.stderr


def test_a_revision_is_read_from_the_hugging_face_cache_or_a_local_dir_download(tmp_path):
    snapshot = tmp_path / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    assert weights.revision(snapshot) == "revision 0123abcd"
    local = tmp_path / "higgs"
    (local / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (local / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text("fedc9876\netag\n1.0\n")
    assert weights.describe("real", {REAL_CHECKPOINT_ENV: str(local)}) == f"real: {local.resolve()}, revision fedc9876"


def test_the_identity_of_weights_leaves_the_path_out():
    assert weights.identity("dummy") == ("dummy", "")
    assert weights.identity("real: /a/b, revision 12") == ("real", "revision 12")
    assert weights.identity("real: /c, d, revision 12") == ("real", "revision 12")


def test_the_copied_format_constants_are_the_references():
    assert (weights.MODEL_TYPE, weights.ARCHITECTURE) == (talker_config.MODEL_TYPE, talker_config.ARCHITECTURE)


def test_the_reports_header_names_the_weights(monkeypatch):
    folder = cached_checkpoint("tiny", 0)
    assert report.weights_line("dummy", 0).startswith(
        "weights   dummy (higgs_dummy/ checkpoints; real weights: tox -e cpu-real")
    monkeypatch.setenv(REAL_CHECKPOINT_ENV, str(folder))
    assert report.weights_line("real", 3) == (f"weights   real: {folder.resolve()}, folder {folder.name} "
                                              "(3 real-weight checks ran)")


# -- the pytest session and the verdict (subprocesses: a session of their own) ----------------------

REAL_CHECK = "conformance/talker/test_real_checkpoint.py::test_config_declares_the_higgs_v3_talker"
NOT_REAL = "tests/test_gate_diff.py::test_identical_runs_are_green"


def session(*args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          env=_env(PYTHONPATH=str(ROOT), **env), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_real_session_without_the_checkpoint_does_not_start():
    out = session("--weights", "real", NOT_REAL)
    assert out.returncode == 2
    assert "refusing to start: real weights (HIGGS_WEIGHTS=real): HIGGS_V3_CHECKPOINT is not set" in out.stdout + out.stderr
    assert "passed" not in out.stdout


@pytest.mark.slow
def test_a_real_session_in_which_no_real_check_ran_fails():
    out = session(NOT_REAL, HIGGS_WEIGHTS="real", HIGGS_V3_CHECKPOINT=str(cached_checkpoint("tiny", 0)))
    assert out.returncode == 1, out.stdout
    assert "1 passed" in out.stdout and "FAILED: a real-weights run in which no real_weights check ran" in out.stdout
    skipped = session(REAL_CHECK, "--weights", "real", "-m", "not real_weights",
                      HIGGS_V3_CHECKPOINT=str(cached_checkpoint("tiny", 0)))
    assert skipped.returncode == 1 and "no real_weights check ran" in skipped.stdout  # deselected: exit 5 becomes 1


@pytest.mark.slow
def test_a_real_session_in_which_a_real_check_ran_passes_and_a_dummy_one_skips_it():
    real = session(REAL_CHECK, "--weights", "real", HIGGS_V3_CHECKPOINT=str(cached_checkpoint("tiny", 0)))
    assert real.returncode == 0 and "1 passed" in real.stdout and "no real_weights check ran" not in real.stdout
    dummy = session(REAL_CHECK, "-rs", HIGGS_V3_CHECKPOINT=str(cached_checkpoint("tiny", 0)))
    assert dummy.returncode == 0 and "1 skipped" in dummy.stdout
    assert "a dummy-weights run (HIGGS_WEIGHTS=dummy): real-weight checks run under `tox -e cpu-real`" in dummy.stdout


def gate_run(out: Path, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "conformance.gate.run", str(out), *args], cwd=ROOT,
                          env=_env(PYTHONPATH=str(ROOT), **env), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_verdict_names_its_weights_and_counts_the_real_checks_that_ran(tmp_path):
    folder = cached_checkpoint("tiny", 0)
    dummy = gate_run(tmp_path / "dummy.json", NOT_REAL, "-n", "0")  # one check: no workers
    assert dummy.returncode == 0, dummy.stdout + dummy.stderr
    verdict = json.loads((tmp_path / "dummy.json").read_text())
    assert (verdict["format"], verdict["weights"], verdict["real_weight_checks_run"]) == (gate_run_module.FORMAT, "dummy", 0)
    assert verdict["pytest_args"][:2] == ["-m", "not gpu"]
    real = gate_run(tmp_path / "real.json", REAL_CHECK, "-n", "0", HIGGS_WEIGHTS="real",  # not the whole suite's collection
                    HIGGS_V3_CHECKPOINT=str(folder))
    assert real.returncode == 0, real.stdout + real.stderr
    verdict = json.loads((tmp_path / "real.json").read_text())
    assert verdict["weights"] == f"real: {folder.resolve()}, folder {folder.name}"
    assert verdict["real_weight_checks_run"] == 1 and verdict["pytest_args"][:2] == ["-m", "real_weights and not gpu"]
    assert verdict["checks"] == {REAL_CHECK: {"outcome": "passed"}}
    refused = gate_run(tmp_path / "refused.json", NOT_REAL, HIGGS_WEIGHTS="real")
    assert refused.returncode == 2 and not (tmp_path / "refused.json").exists()
    assert "HIGGS_V3_CHECKPOINT is not set" in refused.stdout + refused.stderr
