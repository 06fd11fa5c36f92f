"""transformers' HiggsAudioV2TokenizerModel.decode on every codec golden case: `tox -e diff-transformers`.

Runs beside the library's own pins, with the torchaudio it declares (torch and torchaudio 2.11
from the registry: no stand-in). The model is built from the golden's codec config with the tiny
encoder fields (higgs_dummy), and the golden's decode tensors are loaded under their own names
(the checkpoint's layout is transformers' layout); the encode side stays at its initial values,
unused by decode. Only decode is compared here: the encoder's codes against transformers' are
tests/test_codec_encoder.py::test_codes_match_transformers, in the main environment.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version

import numpy as np
import torch

from conformance.differential import codec_cases
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


def main() -> int:
    torch.set_num_threads(1)
    model = transformers_codec()

    def decode(frames: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model.decode(torch.from_numpy(frames)[None], return_dict=True).audio_values[0, 0].numpy()

    checks = [Check("delay_pattern", cannot_run=NOT_IN_IT), Check("state_machine", cannot_run=NOT_IN_IT),
              codec_cases.run(decode),
              Check("encoder_codes", cannot_run="compared in the main environment: tests/test_codec_encoder.py::test_codes_match_transformers"),
              Check("talker2code2wav", cannot_run=NOT_IN_IT)]
    versions = {name: version(name) for name in ("transformers", "torch", "torchaudio")}
    print(json.dumps({"written": str(write_results("transformers", versions, checks))}))
    from conformance.differential.report import print_and_exit_status

    return print_and_exit_status("transformers")


if __name__ == "__main__":
    sys.exit(main())
