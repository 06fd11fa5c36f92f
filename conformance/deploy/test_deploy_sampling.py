"""Sampling validation shared by startup and requests (cases/profiles/sampling.yaml)."""

import pytest

from conformance.case_files import params
from conformance.deploy.deploy_cases import fill
from reference.deploy.resolve import resolve_deployment
from reference.deploy.sampling import SamplingParamsError, validate_sampling_params
from reference.talker.code_channel import talker_sampling_params

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("case", params("profiles/sampling"))
def test_request_params(case):
    if "error" in case:
        with pytest.raises(SamplingParamsError) as info:
            validate_sampling_params(case["params"], case["runner"])
        assert str(info.value) == case["error"]
    else:
        accepted = validate_sampling_params(case["params"], case["runner"])
        assert accepted == case["accepted"]
        # vLLM takes what passes: our bounds are never looser than its own checks
        talker_sampling_params(stop_token_ids=[0], **{"max_tokens": 16, **accepted})


@pytest.mark.parametrize("case", params("profiles/sampling", "profile_cases"))
def test_profile_default_params(case, tmp_path):
    case = fill(case, str(tmp_path))
    (tmp_path / "p.yaml").write_text(case["file"])
    if "error" in case:
        with pytest.raises(SamplingParamsError) as info:
            resolve_deployment(tmp_path / "p.yaml", case["platform"])
        assert str(info.value) == case["error"]
    else:
        assert resolve_deployment(tmp_path / "p.yaml", case["platform"]).default_sampling_params == case["accepted"]
