"""Every shipped profile x every platform resolves to the runner, geometry and switches in
cases/profiles/matrix.yaml, or fails with its exact error."""

from dataclasses import astuple

import pytest

from conformance.case_files import load, params
from reference.deploy.platform_matrix import PLATFORMS, RunnerUnavailable
from reference.deploy.resolve import PROFILES_DIR, resolve_deployment

pytestmark = pytest.mark.cpu


def _check(case):
    overrides = case.get("overrides")
    if "error" in case:
        with pytest.raises(ValueError) as info:
            resolve_deployment(case["profile"], case["platform"], overrides)
        assert str(info.value) == case["error"]
        assert isinstance(info.value, RunnerUnavailable)
        return
    d = resolve_deployment(case["profile"], case["platform"], overrides)
    want = case["expect"]
    assert d.runner == want["runner"]
    assert d.env == want["env"]
    assert list(astuple(d.geometry)) == want["geometry"]
    assert {k: v for k, v in d.options.to_dict().items() if k != "runner"} == want["options"]
    assert d.options.runner == d.runner
    assert d.engine_kwargs["compilation_config"]["cudagraph_mode"] == want["cudagraph_mode"]
    assert d.engine_kwargs["async_scheduling"] == want["async_scheduling"]


@pytest.mark.parametrize("case", params("profiles/matrix"))
def test_profile_on_platform(case):
    _check(case)


@pytest.mark.parametrize("case", params("profiles/matrix", "override_cases"))
def test_runner_override_on_platform(case):
    _check(case)


def test_matrix_covers_every_profile_on_every_platform():
    listed = [(c["profile"], c["platform"]) for c in load("profiles/matrix")["cases"]]
    profiles = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
    assert sorted(listed) == sorted((p, q) for p in profiles for q in PLATFORMS)
