"""transformers' HiggsAudioV2TokenizerModel.decode on every codec golden case: `tox -e diff-transformers`.

Runs beside the library's own pins, with the torchaudio it declares (torch and torchaudio 2.11
from the registry: no stand-in). The model is built from the golden's codec config with the tiny
encoder fields (higgs_dummy), and the golden's decode tensors are loaded under their own names
(the checkpoint's layout is transformers' layout); the encode side stays at its initial values,
unused by decode. The encoder check builds a second model with the tiny encoder dummy's tensors
too and compares its `encode` with reference.codec.encoder on the encoder clips: here with the real
torchaudio resampler (the main environment's tests/test_codec_encoder.py needs a stand-in for it).
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import numpy as np
import torch

from conformance.differential import codec_cases
from conformance.differential.inputs import encoder_clips
from conformance.differential.verdicts import Check, write_results

NOT_IN_IT = "transformers has the Higgs audio tokenizer (codec) only"


def transformers_codec():
    from transformers.models.higgs_audio_v2_tokenizer import HiggsAudioV2TokenizerConfig, HiggsAudioV2TokenizerModel

    from higgs_dummy.encoder_weights import with_encoder_config

    fields = {k: v for k, v in with_encoder_config(codec_cases.fixture_config(), "tiny").items()
              if k not in ("num_codebooks", "hidden_size")}
    model = HiggsAudioV2TokenizerModel(HiggsAudioV2TokenizerConfig(**fields)).eval()
    result = model.load_state_dict(codec_cases.fixture_state(), strict=False)
    decode_side = [k for k in result.missing_keys if k.startswith(("acoustic_decoder.", "fc2."))
                   or (k.startswith("quantizer.") and (k.endswith(".codebook.embed") or ".project_out." in k))]
    if decode_side or result.unexpected_keys:
        raise RuntimeError(f"decode tensors do not load: missing {decode_side[:5]}, unexpected {result.unexpected_keys[:5]}")
    return model


def encoder_check() -> Check:
    """transformers' encode against reference.codec.encoder on the encoder clips (tiny encoder dummy)."""
    from transformers.models.higgs_audio_v2_tokenizer import HiggsAudioV2TokenizerConfig, HiggsAudioV2TokenizerModel

    from higgs_dummy.encoder_weights import encoder_state_dict, with_encoder_config
    from reference.codec.encoder import CodecEncoder

    cfg = with_encoder_config(codec_cases.fixture_config(), "tiny")
    state = {**codec_cases.fixture_state(), **encoder_state_dict("tiny", 0)}
    fields = {k: v for k, v in cfg.items() if k not in ("num_codebooks", "hidden_size")}
    model = HiggsAudioV2TokenizerModel(HiggsAudioV2TokenizerConfig(**fields)).eval()
    result = model.load_state_dict(state, strict=False)
    unloaded = [k for k in result.missing_keys if not k.startswith(("decoder_semantic.", "fc1."))
                and not k.endswith(("inited", "cluster_size", "embed_avg"))]
    if unloaded or result.unexpected_keys:
        raise RuntimeError(f"encoder tensors do not load: missing {unloaded[:5]}, unexpected {result.unexpected_keys[:5]}")
    ours = CodecEncoder.from_state_dict(cfg, state)
    rate, clips = encoder_clips()
    check = Check("encoder_codes", "exact: every code equal (tiny encoder dummy, seed 0; their torchaudio resampler, ours)")
    for clip_id, wav in clips:
        with torch.no_grad():
            theirs = model.encode(torch.from_numpy(wav)[None, None], return_dict=True).audio_codes[0].numpy()
            mine = ours.encode(torch.from_numpy(wav), rate).numpy()
        if theirs.shape != mine.shape:
            check.add(clip_id, "frame_count", f"ours {mine.shape}, theirs {theirs.shape}")
        elif not np.array_equal(theirs, mine):
            check.add(clip_id, "codes", f"{int((theirs != mine).sum())}/{mine.size} codes differ")
        else:
            check.add(clip_id, None, f"{mine.shape[1]} frames x 8 codes equal")
    return check


def main() -> int:
    torch.set_num_threads(1)
    model = transformers_codec()

    def decode(frames: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model.decode(torch.from_numpy(frames)[None], return_dict=True).audio_values[0, 0].numpy()

    checks = [Check("delay_pattern", cannot_run=NOT_IN_IT), Check("state_machine", cannot_run=NOT_IN_IT),
              codec_cases.run(decode),
              encoder_check(),
              Check("talker2code2wav", cannot_run=NOT_IN_IT)]
    versions = {name: version(name) for name in ("transformers", "torch", "torchaudio")}
    print(json.dumps({"written": str(write_results("transformers", versions, checks))}))
    from conformance.differential.report import print_and_exit_status

    return print_and_exit_status("transformers")


if __name__ == "__main__":
    sys.exit(main())
