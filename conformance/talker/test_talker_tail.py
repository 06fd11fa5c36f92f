"""How a stream ends (conformance/cases/talker/tail.yaml): the ramp-down follows the training
layout, upstream's variant changes what the case file measured, and a stream cut by max_tokens
keeps every real frame."""

import functools

import numpy as np
import pytest

from conformance import case_files
from conformance.talker import talker_cases
from conformance.oracles.talker_torch import OracleTalker
from higgs_dummy.cache import cached_checkpoint
from reference.codec.delay_pattern import EOC, rows_to_frames
from reference.speech import SpeechAPI

pytestmark = pytest.mark.cpu

PROMPTS = talker_cases.load_prompts()
BY_ID = {p["id"]: p for p in PROMPTS["prompts"]}
GOLDENS = talker_cases.load_goldens()


def _leading_eoc(row) -> int:
    return int(np.cumprod(np.asarray(row) == EOC).sum())


@functools.cache
def _upstream_rows(prompt_id: str) -> np.ndarray:
    checkpoint = cached_checkpoint(PROMPTS["checkpoint"]["size"], PROMPTS["checkpoint"]["seed"])
    prompt = SpeechAPI(None, checkpoint, "v1").prompt(talker_cases.speech_request(BY_ID[prompt_id], PROMPTS["max_tokens"]))
    return np.asarray(OracleTalker(checkpoint).generate(prompt, PROMPTS["max_tokens"], ramp_down="upstream").rows)


@pytest.mark.parametrize("case", case_files.params("talker/tail", "ramp_down"))
def test_the_ramp_down_follows_the_training_layout(case):
    golden = GOLDENS["streams"][case["prompt"]]
    assert golden["finished"], "the case needs a stream that reached EOC"
    assert [_leading_eoc(r) for r in golden["rows"][-8:]] == list(range(1, 9))
    assert _leading_eoc(golden["rows"][-9]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("case", case_files.params("talker/tail", "ramp_down"))
def test_upstream_ramp_down_changes_what_the_case_measured(case):
    ours, theirs = np.asarray(GOLDENS["streams"][case["prompt"]]["rows"]), _upstream_rows(case["prompt"])
    assert ours.shape == theirs.shape, "the two ramp-downs give streams of different lengths"
    differing = [i for i in range(len(ours)) if (ours[i] != theirs[i]).any()]
    ours_frames, theirs_frames = rows_to_frames(ours), rows_to_frames(theirs)
    assert ours_frames.shape == theirs_frames.shape
    measured = {
        "first_differing_row": differing[0] if differing else None,
        "differing_rows": len(differing),
        "frames": ours_frames.shape[1],
        "differing_frames_per_codebook": (ours_frames != theirs_frames).sum(axis=1).tolist(),
    }
    assert measured == case["upstream_variant"]


@pytest.mark.parametrize("case", case_files.params("talker/tail", "cut_off"))
def test_a_stream_cut_by_max_tokens_keeps_every_real_frame(case):
    golden = GOLDENS["streams"][case["prompt"]]
    assert not golden["finished"] and len(golden["rows"]) == PROMPTS["max_tokens"]
    frames = rows_to_frames(np.asarray(golden["rows"]))
    assert frames.shape[1] == case["frames"] == len(golden["rows"]) - 7
    assert ((frames >= 0) & (frames < 1024)).all()
    assert case["upstream_frames"] == case["frames"] - 1  # upstream drops the last frame of every stream
