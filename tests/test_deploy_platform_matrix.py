"""The runner-by-platform rule table."""

import pytest

from reference.deploy.platform_matrix import (
    PLATFORMS,
    RunnerUnavailable,
    select_runner,
    unavailable_message,
    vllm_env,
)

pytestmark = pytest.mark.cpu


def test_platform_list():
    assert tuple(PLATFORMS) == ("cuda", "rocm", "npu", "xpu", "musa", "cpu")
    assert [p for p, row in PLATFORMS.items() if row.runs_v2] == ["cuda"]


@pytest.mark.parametrize("platform", list(PLATFORMS))
def test_each_request_on_each_platform(platform):
    v2_ok = platform == "cuda"
    assert select_runner("v1", platform).runner == "v1"
    prefer = select_runner("prefer-v2", platform)
    assert (prefer.runner, prefer.pinned) == (("v2", False) if v2_ok else ("v1", True))
    if v2_ok:
        assert select_runner("v2", platform).runner == "v2"
    else:
        with pytest.raises(RunnerUnavailable, match=f"platform '{platform}'"):
            select_runner("v2", platform, "x.yaml")


def test_unavailable_message_names_origin_platform_and_v1_profile():
    msg = unavailable_message("cpu", "p.yaml")
    assert msg.startswith("model_runner: v2 (set by p.yaml) is not available on platform 'cpu' (")
    assert "Triton" in msg and "reference/deploy/profiles/low_latency.yaml" in msg


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown platform 'tpu'"):
        select_runner("v2", "tpu")
    with pytest.raises(ValueError, match="model_runner must be one of"):
        select_runner("auto", "cuda")
    with pytest.raises(ValueError):
        vllm_env("auto")


def test_env_is_always_explicit():
    assert vllm_env("v2") == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert vllm_env("v1") == {"VLLM_USE_V2_MODEL_RUNNER": "0"}
