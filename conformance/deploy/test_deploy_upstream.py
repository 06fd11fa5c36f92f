"""vllm-omni's own deploy files and overlays on them (cases/profiles/upstream.yaml)."""

import logging
from dataclasses import astuple

import pytest

from conformance.case_files import params
from conformance.deploy.deploy_cases import fill, needs_upstream, upstream_deploy_dir, value_at
from reference.deploy.resolve import resolve_deployment

pytestmark = [pytest.mark.cpu, needs_upstream]
LOGGER = "higgs_ref.deploy"


def _has(tree, dotted):
    try:
        value_at(tree, dotted)
    except (KeyError, TypeError):
        return False
    return True


@pytest.mark.parametrize("case", params("profiles/upstream"))
def test_upstream_case(case, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    case = fill(case, str(tmp_path))
    if "overlay" in case:
        (tmp_path / "p.yaml").write_text(case["overlay"])
        path = tmp_path / "p.yaml"
    else:
        path = upstream_deploy_dir() / case["file"]
    if "error" in case:
        with pytest.raises(ValueError) as info:
            resolve_deployment(path, case["platform"])
        assert str(info.value) == case["error"]
        return
    d = resolve_deployment(path, case["platform"])
    want = case["expect"]
    assert d.runner == want["runner"]
    assert list(astuple(d.geometry)) == want["geometry"]
    tree = dict(d.config, engine_kwargs=d.engine_kwargs, codec_stage=d.codec_stage)
    for key, value in want.get("values", {}).items():
        assert value_at(tree, key) == value, key
    for key in want.get("absent", []):
        assert not _has(tree, key), key
    for key, origin in want.get("origins", {}).items():
        assert d.origins[key] == origin, key
    assert list(d.warnings) == want["warnings"]
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == want["warnings"]
