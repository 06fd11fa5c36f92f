"""Upstream's own deploy loader beside ours on the same files (cases/profiles/upstream.yaml,
loader_cases): where they agree, and the differences that are ours on purpose."""

import pytest

from conformance.case_files import params
from conformance.deploy.deploy_cases import fill, needs_upstream, upstream_deploy_dir
from conformance.deploy.upstream_loader import compare, resolve_upstream
from reference.deploy.resolve import PROFILES_DIR, resolve_deployment

pytestmark = [pytest.mark.cpu, needs_upstream]


def _path(case, tmp_path):
    if "overlay" in case:
        (tmp_path / "p.yaml").write_text(case["overlay"])
        return tmp_path / "p.yaml"
    if "profile" in case:
        return PROFILES_DIR / f"{case['profile']}.yaml"
    return upstream_deploy_dir() / case["file"]


@pytest.mark.parametrize("case", params("profiles/upstream", "loader_cases"))
def test_both_loaders(case, tmp_path):
    case = fill(case, str(tmp_path))
    path = _path(case, tmp_path)
    theirs = resolve_upstream([(str(path), p) for p in case["platforms"]])
    for platform, upstream in zip(case["platforms"], theirs):
        try:
            ours = resolve_deployment(path, platform)
        except ValueError as exc:
            ours = exc
        keys = [d.split(":")[0] for d in compare(ours, upstream)]
        assert keys == case.get("differences_on", {}).get(platform, case["differences"]), (platform, compare(ours, upstream))
