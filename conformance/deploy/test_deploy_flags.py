"""Feature-switch resolution (cases/profiles/flags.yaml): options, the engine settings each
switch changes, and the warnings logged once per launch."""

import logging

import pytest

from conformance.case_files import params
from reference.deploy.resolve import resolve_deployment
from reference.deploy.switches import SWITCH_NAMES, resolve_switches
from reference.talker.options import HF_OVERRIDES_KEY, TalkerOptions

pytestmark = pytest.mark.cpu
LOGGER = "higgs_ref.deploy"


def _messages(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


@pytest.mark.parametrize("case", params("profiles/flags"))
def test_switch_resolution(case, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    overrides = case.get("overrides")
    if "error" in case:
        with pytest.raises(ValueError) as info:
            resolve_deployment(case["profile"], case["platform"], overrides)
        assert str(info.value) == case["error"]
        return
    d = resolve_deployment(case["profile"], case["platform"], overrides)
    want = case["expect"]
    for name, value in want.get("options", {}).items():
        assert getattr(d.options, name) is value, name
    hf_options = d.engine_kwargs["hf_overrides"][HF_OVERRIDES_KEY]
    assert hf_options == d.options.to_dict()
    for name, value in want.get("hf_options", {}).items():
        assert hf_options[name] == value, name
    if "cudagraph_mode" in want:
        assert d.engine_kwargs["compilation_config"]["cudagraph_mode"] == want["cudagraph_mode"]
    if "first_chunk_frames" in want:
        assert d.geometry.first_chunk_frames == want["first_chunk_frames"]
    if "async_scheduling" in want:
        assert d.engine_kwargs["async_scheduling"] is want["async_scheduling"]
    for key, origin in want.get("origins", {}).items():
        assert d.origins[key] == origin, key
    assert _messages(caplog) == want["warnings"]
    assert list(d.warnings) == want["warnings"]


@pytest.mark.parametrize(
    "profile, overrides",
    [
        ("low_latency", {"features.model_sampler": True, "features.device_talker_state": True}),
        ("low_latency", {"stages.0.async_scheduling": True}),
    ],
)
def test_warning_once_per_launch_with_helpers_called_again(profile, overrides, caplog):
    """One launch: resolve once in the launcher, then every helper a launcher or worker may call again."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    d = resolve_deployment(profile, "cuda", overrides)
    assert len(_messages(caplog)) == 1
    requested = {n: overrides.get(f"features.{n}") for n in SWITCH_NAMES}
    for _ in range(3):  # helpers are pure: calling them again logs nothing
        again = resolve_switches(requested, d.runner, enforce_eager=True)
        assert again.options == d.options
    for _worker in range(4):  # each worker rebuilds the options from the HF config
        assert TalkerOptions.from_dict(d.engine_kwargs["hf_overrides"][HF_OVERRIDES_KEY]) == d.options
    assert len(_messages(caplog)) == 1
