"""A resolved deploy profile drives the engine vLLM really builds (issue: profiles, matrix)."""

from dataclasses import astuple

import pytest

from conformance import talker_cases
from conformance.case_files import load, params
from conformance.engines import platform_engine_args
from conformance.environment import has_cuda
from higgs_dummy.cache import cached_checkpoint
from reference.deploy.resolve import resolve_deployment
from reference.speech import SpeechAPI
from reference.talker.engine import built_runners, start_llm_for_deployment

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu]

DOC = load("profiles/boot")
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
    if "error" in expect:
        with pytest.raises(ValueError, match=expect["error"]):
            resolve_deployment(case["profile"], case["platform"], DOC["overrides"])
        return
    deployment = resolve_deployment(case["profile"], case["platform"], DOC["overrides"])
    assert deployment.runner == expect["runner"]
    assert list(astuple(deployment.geometry)) == expect["geometry"]
    checkpoint = cached_checkpoint("tiny", 0)
    llm = start_llm_for_deployment(checkpoint, deployment, dtype="float32", **platform_engine_args())
    try:
        assert built_runners(llm) == [expect["runner"]]
        prompt = next(p for p in PROMPTS["prompts"] if p["id"] == DOC["prompt"])
        result = SpeechAPI(llm, checkpoint, deployment.runner).generate(
            [talker_cases.speech_request(prompt, PROMPTS["max_tokens"])]
        )[0]
        assert result.rows == talker_cases.load_goldens()["streams"][DOC["prompt"]]["rows"]
    finally:
        llm.llm_engine.engine_core.shutdown()
