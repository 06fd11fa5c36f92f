"""The real checkpoint (bosonai/higgs-audio-v3-tts-4b) against the facts the reference relies on:
the config, the tokenizer's special tokens, every tensor name, the bundled codec, one request.

Runs in a real-weights session (tox -e cpu-real, gpu-real: HIGGS_WEIGHTS=real), which refuses to start
unless HIGGS_V3_CHECKPOINT names a local copy; a dummy-weights session skips it, saying so (conftest.py)."""

import json
import os
from pathlib import Path

import pytest

from conformance.talker import check_checkpoint
from conformance.environment import REAL_CHECKPOINT_ENV
from reference.codec.model import load_codec
from reference.talker.config import ARCHITECTURE, MODEL_TYPE
from reference.talker.special_tokens import load_tokenizer, special_ids

pytestmark = [pytest.mark.real_weights, pytest.mark.slow]


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    return Path(os.environ[REAL_CHECKPOINT_ENV])


def test_config_declares_the_higgs_v3_talker(checkpoint):
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["model_type"] == MODEL_TYPE
    assert ARCHITECTURE in config["architectures"]
    assert config["audio_encoder_config"]["num_codebooks"] == 8
    assert config["audio_encoder_config"]["vocab_size"] == 1026
    assert (config["audio_stream_bos_id"], config["audio_stream_eos_id"]) == (1024, 1025)


def test_tokenizer_has_the_tts_special_tokens(checkpoint):
    ids = special_ids(load_tokenizer(checkpoint))
    assert ids.eos == 151643
    assert ids.audio_end == 151671


def test_every_assumption_of_check_checkpoint_holds(checkpoint):
    findings = check_checkpoint.check(checkpoint)
    assert all(f.ok for f in findings), "\n".join(str(f) for f in findings if not f.ok)


def test_bundled_codec_loads_and_decodes(checkpoint):
    import torch

    codec = load_codec(checkpoint)
    pcm = codec.decode(torch.zeros(8, 5, dtype=torch.long))
    assert pcm.shape == (5 * 960,) and torch.isfinite(pcm).all()
