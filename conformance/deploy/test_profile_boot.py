"""A resolved deploy profile drives the engine vLLM really builds (issue: profiles, matrix), and
vLLM built what the profile says: every worker reports its settings after vLLM's own resolution
(reference/deploy/readback.py), each compared with the resolved profile."""

from dataclasses import astuple

import pytest

from conformance.talker import talker_cases
from conformance.case_files import load, params
from conformance.engines import platform_engine_args
from conformance.environment import has_cuda
from higgs_dummy.cache import cached_checkpoint
from reference.deploy.readback import check_build
from reference.deploy.resolve import resolve_deployment
from reference.speech import SpeechAPI
from reference.talker.engine import built_runners, built_settings, start_llm_for_deployment

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu]

DOC = load("profiles/boot")
ENGINE_PARAM = "case"  # every case boots an engine of its own: pytest-xdist may run them side by side (conftest.py)
PROMPTS = talker_cases.load_prompts()
THIS_PLATFORM = "cuda" if has_cuda() else "cpu"


def _marks(case):
    if case["platform"] == THIS_PLATFORM:
        return ()
    hint = ": run `tox -e gpu` on a CUDA machine" if case["platform"] == "cuda" else ""
    return pytest.mark.skip(reason=f"boots on {case['platform']}; this machine is {THIS_PLATFORM}{hint}")


@pytest.mark.parametrize("case", params("profiles/boot", marks=_marks))
def test_profile_boots_the_runner_it_resolved(case):
    expect = case["expect"]
    overrides = {**DOC["overrides"], **case.get("overrides", {})}
    if "error" in expect:
        with pytest.raises(ValueError, match=expect["error"]):
            resolve_deployment(case["profile"], case["platform"], overrides)
        return
    deployment = resolve_deployment(case["profile"], case["platform"], overrides)
    assert deployment.runner == expect["runner"]
    assert list(astuple(deployment.geometry)) == expect["geometry"]
    checkpoint = cached_checkpoint("tiny", 0)
    engine_args = platform_engine_args()
    llm = start_llm_for_deployment(checkpoint, deployment, dtype="float32", **engine_args)
    try:
        assert built_runners(llm) == [expect["runner"]]
        check_build(deployment, built_settings(llm), engine_args)  # raises naming key, profile, both values
        prompt = next(p for p in PROMPTS["prompts"] if p["id"] == DOC["prompt"])
        result = SpeechAPI(llm, checkpoint, deployment.runner).generate(
            [talker_cases.speech_request(prompt, PROMPTS["max_tokens"])]
        )[0]
        assert result.rows == talker_cases.load_goldens()["streams"][DOC["prompt"]]["rows"]
    finally:
        llm.llm_engine.engine_core.shutdown()
