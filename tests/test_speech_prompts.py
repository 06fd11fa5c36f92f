"""Talker prompts in upstream's layout, and the reference voice as codes, samples or a WAV file."""

import numpy as np
import pytest
import torch

from conformance.talker import talker_cases
from higgs_dummy.cache import cached_checkpoint
from reference.codec.encoder import frames_for, load_encoder
from reference.codec.wav_io import read_wav, write_wav
from reference.speech import SpeechAPI, SpeechRequest
from reference.talker.prompts import reference_slots

pytestmark = pytest.mark.cpu


@pytest.fixture(scope="module")
def api():
    return SpeechAPI(engine=None, checkpoint=cached_checkpoint("tiny", 0), runner="v1")


def test_zero_shot_prompt_layout(api):
    prompt = api.prompt(SpeechRequest("Hi."))
    ids = api.ids
    assert prompt.token_ids == (ids.tts, ids.text, *api.tokenizer.encode("Hi.", add_special_tokens=False), ids.audio)
    assert prompt.ref_rows == () and prompt.ref_start is None


def test_voice_clone_prompt_layout(api):
    codes = np.random.default_rng(0).integers(0, 1024, size=(8, 3))
    prompt = api.prompt(SpeechRequest("Hi.", ref_codes=codes.tolist(), ref_text="Ref."))
    ids, encode = api.ids, lambda t: api.tokenizer.encode(t, add_special_tokens=False)
    rows = 3 + 7  # the delay pattern adds 7 rows
    head = [ids.tts, ids.ref_text, *encode("Ref."), ids.ref_audio]
    assert prompt.token_ids == (*head, *[ids.tts] * rows, ids.text, *encode("Hi."), ids.audio)
    assert prompt.ref_start == len(head) and len(prompt.ref_rows) == rows
    assert list(prompt.codes_by_position()) == list(range(len(head), len(head) + rows))
    assert prompt.ref_rows[0] == (int(codes[0, 0]),) + (1024,) * 7  # BOC lead-in
    assert prompt.ref_rows[-1] == (1025,) * 7 + (int(codes[7, 2]),)  # EOC ramp-down


def test_reference_slots_are_checked_against_the_prompt():
    assert reference_slots(20, 3, 10) == range(3, 13)
    assert reference_slots(20, None, 0) == range(0)
    for start in (None, 0, 11):
        with pytest.raises(ValueError, match="do not fit a prompt of 20 tokens"):
            reference_slots(20, start, 10)


def test_voice_clone_from_a_wav_equals_voice_clone_from_its_codes(api, tmp_path):
    audio = talker_cases.reference_audio({"seconds": 0.5, "seed": 5})
    path = write_wav(tmp_path / "ref.wav", audio, 24000)
    codes = load_encoder(api.checkpoint).encode(audio, 24000)
    assert codes.shape == (8, frames_for(len(audio)))
    from_codes = api.prompt(SpeechRequest("Hi.", ref_codes=codes.tolist(), ref_text="Ref."))
    from_samples = api.prompt(SpeechRequest("Hi.", ref_audio=audio, ref_sample_rate=24000, ref_text="Ref."))
    from_file = api.prompt(SpeechRequest("Hi.", ref_audio=path, ref_text="Ref."))
    assert from_samples == from_codes
    # The file holds 16-bit samples: the same voice, a few codes apart at most.
    assert from_file.token_ids == from_codes.token_ids and len(from_file.ref_rows) == len(from_codes.ref_rows)
    file_codes = load_encoder(api.checkpoint).encode(*read_wav(path))
    assert api.prompt(SpeechRequest("Hi.", ref_codes=file_codes.tolist(), ref_text="Ref.")) == from_file


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (SpeechRequest("Hi.", ref_codes=[[1]] * 8, ref_audio=np.zeros(2400, np.float32)), "not both"),
        (SpeechRequest("Hi.", ref_text="Ref."), "ref_text without a reference"),
        (SpeechRequest("   "), "text is empty"),
        (SpeechRequest("Hi.", ref_codes=[[1]] * 8, ref_text=" "), "ref_text is empty"),
    ],
    ids=["codes_and_audio", "ref_text_alone", "blank_text", "blank_ref_text"],
)
def test_bad_requests_are_refused_with_the_reason(api, request_, message):
    with pytest.raises(ValueError, match=message):
        api.prompt(request_)


def test_ref_audio_array_at_another_rate_is_resampled(api):
    audio = talker_cases.reference_audio({"seconds": 0.5, "seed": 5})
    at_24k = api.reference_codes(SpeechRequest("Hi.", ref_audio=audio, ref_sample_rate=24000))
    at_48k = api.reference_codes(SpeechRequest("Hi.", ref_audio=torch.from_numpy(np.repeat(audio, 2)), ref_sample_rate=48000))
    assert at_48k.shape == at_24k.shape
