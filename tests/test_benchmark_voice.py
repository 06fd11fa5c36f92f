"""The benchmark's named voice (`--voice-seconds`): the setting reaches the run, and the voice is
seeded codes of that length at the checkpoint's frame rate."""

import pytest

from benchmarks.__main__ import parse_args, settings_from
from benchmarks.streams import named_voice
from higgs_dummy.cache import cached_checkpoint

pytestmark = pytest.mark.cpu


def test_voice_seconds_reaches_the_settings():
    assert settings_from(parse_args(["--platform", "cpu", "--voice-seconds", "10"])).voice_seconds == 10.0
    assert settings_from(parse_args(["--platform", "cpu"])).voice_seconds == 0.0


def test_a_ten_second_voice_is_250_frames_the_same_every_run():
    checkpoint = cached_checkpoint("tiny", 0)
    voice = named_voice(checkpoint, 10)
    assert (len(voice), len(voice[0])) == (8, 250)
    assert voice == named_voice(checkpoint, 10)
    assert all(0 <= code < 1024 for row in voice for code in row)
    assert named_voice(checkpoint, 0) is None
