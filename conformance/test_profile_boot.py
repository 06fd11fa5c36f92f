"""A resolved deployment profile drives the engine vLLM really builds (issue: profiles, matrix)."""

from dataclasses import astuple

import pytest
import yaml

from conformance import talker_cases
from conformance.engines import platform_engine_args
from conformance.environment import has_cuda
from higgs_dummy.cache import cached_checkpoint
from reference.deploy.resolve import resolve_deployment
from reference.talker.engine import built_runners, start_llm_for_deployment
from reference.speech import SpeechAPI

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu]

DOC = yaml.safe_load((talker_cases.CASES_DIR.parent / "profiles" / "boot.yaml").read_text())
PROMPTS = talker_cases.load_prompts()
THIS_PLATFORM = "cuda" if has_cuda() else "cpu"


def _params():
    for case in DOC["cases"]:
        marks = ()
        if case["platform"] != THIS_PLATFORM:
            marks = pytest.mark.skip(reason=f"boots on {case['platform']}; this machine is {THIS_PLATFORM}"
                                     + (": run `tox -e gpu` on a CUDA machine" if case["platform"] == "cuda" else ""))
        yield pytest.param(case, id=case["id"], marks=marks)


@pytest.mark.parametrize("case", list(_params()))
def test_profile_boots_the_runner_it_resolved(case):
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(ValueError, match=expect["error"]):
            resolve_deployment(case["profile"], case["platform"])
        return
    deployment = resolve_deployment(case["profile"], case["platform"])
    assert deployment.runner == expect["runner"]
    assert list(astuple(deployment.geometry)) == expect["geometry"]
    checkpoint = cached_checkpoint("tiny", 0)
    llm = start_llm_for_deployment(checkpoint, deployment, dtype="float32", **{**DOC["overrides"], **platform_engine_args()})
    try:
        assert built_runners(llm) == [expect["runner"]]
        prompt = next(p for p in PROMPTS["prompts"] if p["id"] == DOC["prompt"])
        result = SpeechAPI(llm, checkpoint, deployment.runner).generate(
            [talker_cases.speech_request(prompt, PROMPTS["max_tokens"])]
        )[0]
        assert result.rows == talker_cases.load_goldens()["streams"][DOC["prompt"]]["rows"]
    finally:
        llm.llm_engine.engine_core.shutdown()
