"""The worker refuses a runner other than the one asked for (no silent V1 <-> V2 fallback)."""

import pytest

from reference.talker.worker import runner_mismatch


@pytest.mark.parametrize("built, env, resolved", [("v2", "1", "v2"), ("v1", "0", "v1"), ("v1", None, None),
                                                  ("v2", None, "v2"), ("v1", "0", None)])
def test_the_runner_asked_for_passes(built, env, resolved):
    assert runner_mismatch(built, env, resolved) is None


def test_v2_asked_in_the_environment_but_v1_built_is_refused():
    problem = runner_mismatch("v1", "1", None)
    assert problem and "built Model Runner V1" in problem and "VLLM_USE_V2_MODEL_RUNNER=1" in problem


def test_v1_asked_in_the_environment_but_v2_built_is_refused():
    problem = runner_mismatch("v2", "0", None)
    assert problem and "built Model Runner V2" in problem and "asked for V1" in problem


def test_a_profile_that_resolved_v2_refuses_a_v1_engine():
    problem = runner_mismatch("v1", None, "v2")
    assert problem and "resolved Model Runner V2 but vLLM built V1" in problem
