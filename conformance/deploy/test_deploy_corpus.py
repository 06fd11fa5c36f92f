"""Every deploy file of the installed vllm-omni wheel resolves or is refused naming file and key;
nothing else escapes (the corpus; expected counts in cases/profiles/upstream.yaml)."""

import sys

import pytest

from conformance.case_files import load
from conformance.deploy.deploy_cases import needs_upstream, upstream_deploy_dir, upstream_version
from conformance.deploy.upstream_deploy import corpus, resolve_file
from reference.deploy.platform_matrix import PLATFORMS

pytestmark = [pytest.mark.cpu, needs_upstream]
EXPECT = load("profiles/upstream")["corpus"]


@pytest.fixture(scope="module")
def outcomes():
    return corpus(upstream_deploy_dir())


def test_wheel_version():
    assert upstream_version() == EXPECT["version"]


def test_every_refusal_names_the_file(outcomes):
    for o in outcomes:
        if o.status != "resolved":
            assert "vllm_omni/deploy/" in o.message, (o.file, o.message)


def test_corpus_counts(outcomes):
    assert len({o.file for o in outcomes}) == EXPECT["files"]
    assert len(outcomes) == EXPECT["resolutions"]
    assert sum(o.status == "resolved" for o in outcomes) == EXPECT["resolved"]
    for status, files in EXPECT["refused"].items():
        hits = [o for o in outcomes if o.status == status]
        if isinstance(files, int):
            assert len(hits) == files, status
        else:
            assert sorted({o.file for o in hits}) == sorted(files), status


@pytest.mark.parametrize("name", EXPECT["resolve_everywhere"])
def test_file_resolves_on_every_platform(name):
    outcomes = resolve_file(upstream_deploy_dir() / name, list(PLATFORMS))
    assert [(o.platform, o.status, o.message) for o in outcomes if o.status != "resolved"] == []


def test_vllm_omni_is_never_imported(outcomes):
    assert not [m for m in sys.modules if m == "vllm_omni" or m.startswith("vllm_omni.")]


def test_wheel_is_off_the_import_path():
    # Installed into site-packages its vllm.general_plugins entry point would make vLLM import
    # vllm_omni (which patches vLLM) in every engine.
    import importlib.util
    from importlib.metadata import entry_points

    assert importlib.util.find_spec("vllm_omni") is None
    assert not [e for e in entry_points(group="vllm.general_plugins") if e.value.startswith("vllm_omni")]
