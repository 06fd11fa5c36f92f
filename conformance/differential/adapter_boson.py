"""boson-multimodal 0.1.1 (Boson AI's own Higgs Audio code) on our inputs: `tox -e diff-boson`.

Runs beside the package's own pins (transformers < 4.47, torch 2.11 with torchaudio,
descript-audio-codec, vector-quantize-pytorch), never beside vLLM. What it calls:
- delay pattern: `model/higgs_audio/utils.py` `build_delay_pattern_mask` (BOC 1024, pad EOC 1025)
  and `revert_delay_pattern`;
- state machine: `HiggsAudioModel._sample_audio_tokens` of a tiny HiggsAudioModel (Llama body of
  one layer; the method reads only the config's ids and the delay-pattern switch), greedy, with
  repetition-aware sampling off (`ras_win_len` None), stepped over the seeded logits;
- encoder codes: `HiggsAudioTokenizer.encode` (conformance/differential/boson_encoder.py);
- codec decode: `HiggsAudioTokenizer.decode` with the golden's codec weights in boson's `model.pth`
  layout (higgs_dummy.codec_weights.to_boson_layout). Two things stand between the package and an
  offline tiny codec, both outside decode: its constructor loads the HuBERT teacher from the hub
  by name (a one-layer HuBERT is written to a private hub cache under that name, offline), and it
  builds `decoder_2` at 1024 channels (`dac2.Decoder(D, 1024, ratios)`); the golden's tiny codec
  has 64, so `decoder_2` is rebuilt with the package's own `dac2.Decoder` at 64 before loading.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np
import torch

from conformance.differential import boson_encoder, codec_cases, delay_grids, state_machine
from conformance.differential.inputs import BOC, EOC, NUM_CODEBOOKS
from conformance.differential.verdicts import Check, write_results

AUDIO_EOS_TOKEN = 128012  # boson's <|audio_eos|> id (HiggsAudioConfig.audio_eos_token_id default)
HUBERT_NAME = "facebook/hubert-base-ls960"  # what HiggsAudioTokenizer(semantic_techer="hubert_base") loads


def delay_check() -> Check:
    from boson_multimodal.model.higgs_audio.utils import build_delay_pattern_mask, revert_delay_pattern

    def apply(codes: np.ndarray) -> np.ndarray:
        delayed, _ = build_delay_pattern_mask(torch.from_numpy(codes)[None], bos_token_id=BOC, pad_token_id=EOC)
        return delayed[0].T.numpy()  # [N, T + N - 1] -> rows [T + N - 1, N]

    def revert(rows: np.ndarray) -> np.ndarray:
        return revert_delay_pattern(torch.from_numpy(np.ascontiguousarray(rows.T))).numpy()

    return delay_grids.run(apply, revert)


def tiny_model():
    from boson_multimodal.model.higgs_audio import HiggsAudioConfig, HiggsAudioModel

    config = HiggsAudioConfig(
        text_config={"model_type": "llama", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 128256},
        audio_encoder_config={"d_model": 16, "encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 32},
        skip_audio_tower=True, use_delay_pattern=True, audio_num_codebooks=NUM_CODEBOOKS,
        audio_codebook_size=1024, audio_stream_bos_id=BOC, audio_stream_eos_id=EOC,
        audio_eos_token_id=AUDIO_EOS_TOKEN)
    return HiggsAudioModel(config).eval()


def state_machine_check() -> Check:
    from transformers import GenerationConfig, LogitsProcessorList

    model = tiny_model()
    generation = GenerationConfig(generation_kwargs={"ras_win_len": None, "audio_eos_token_id": AUDIO_EOS_TOKEN})

    def make_stepper():
        state = {"num_delay": 0, "remaining": None, "history": torch.zeros((NUM_CODEBOOKS, 0), dtype=torch.long)}

        def step(logits: np.ndarray):
            out = model._sample_audio_tokens(
                hidden_states=None, audio_logits=torch.from_numpy(logits)[None], audio_out_ids=state["history"],
                do_sample=False, logits_processor=LogitsProcessorList(), device=torch.device("cpu"),
                torch_generator=None, generation_config=generation, num_delay=state["num_delay"],
                num_remaining_delays=state["remaining"])
            next_tokens, audio_tokens, _, _, state["num_delay"], state["remaining"] = out
            state["history"] = torch.cat([state["history"], audio_tokens[:, None]], dim=1)
            return audio_tokens.tolist(), int(next_tokens[0]) == AUDIO_EOS_TOKEN

        return step

    return state_machine.run(make_stepper)


def hub_snapshot(cache: Path) -> Path:
    """The folder of HUBERT_NAME in a private hub cache (refs/main names it), for offline lookups."""
    revision = "0" * 40
    snapshot = cache / f"models--{HUBERT_NAME.replace('/', '--')}" / "snapshots" / revision
    refs = snapshot.parents[1] / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "main").write_text(revision)
    return snapshot


def _offline_hubert(cache: Path) -> None:
    """A one-layer HuBERT under HUBERT_NAME (decode never runs it)."""
    from transformers import HubertConfig, HubertModel

    HubertModel(HubertConfig(hidden_size=768, num_hidden_layers=1, num_attention_heads=12, intermediate_size=64,
                             conv_dim=[16] * 7)).save_pretrained(hub_snapshot(cache))


def boson_codec():
    """HiggsAudioTokenizer with the golden's tiny codec weights, in boson's layout."""
    from boson_multimodal.audio_processing.descriptaudiocodec.dac.model import dac as dac2
    from boson_multimodal.audio_processing.higgs_audio_tokenizer import HiggsAudioTokenizer

    from higgs_dummy.codec_weights import to_boson_layout

    cfg = codec_cases.fixture_config()
    acoustic = cfg["acoustic_model_config"]
    ratios = list(acoustic["upsampling_ratios"])
    tokenizer = HiggsAudioTokenizer(D=acoustic["hidden_size"], ratios=ratios, sample_rate=24000, bins=1024, n_q=NUM_CODEBOOKS,
                                    codebook_dim=64, semantic_techer="hubert_base", semantic_sample_rate=16000,
                                    device="cpu")
    tokenizer.decoder_2 = dac2.Decoder(acoustic["hidden_size"], acoustic["decoder_hidden_size"], ratios)
    state = to_boson_layout(codec_cases.fixture_state(), cfg)
    result = tokenizer.load_state_dict(state, strict=False)
    needed = [k for k in result.missing_keys if k.startswith(("decoder_2.", "fc_post2.", "quantizer."))
              and not k.endswith(("inited", "cluster_size", "embed_avg")) and ".project_in." not in k]  # encode only
    if needed or result.unexpected_keys:
        raise RuntimeError(f"boson layout does not load: missing {needed[:5]}, unexpected {result.unexpected_keys[:5]}")
    return tokenizer.eval()


def codec_check(hub_cache: Path) -> Check:
    _offline_hubert(hub_cache)
    tokenizer = boson_codec()

    def decode(frames: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return tokenizer.decode(torch.from_numpy(frames)[None])[0, 0]  # [1, 8, T] -> [1, 1, N]

    return codec_cases.run(decode)


def main() -> int:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as hub_cache:
        # Before transformers is imported (huggingface_hub reads these once): offline, a private cache.
        os.environ.update(HF_HUB_CACHE=hub_cache, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        checks = [delay_check(), state_machine_check(), codec_check(Path(hub_cache)),
                  boson_encoder.run(hub_snapshot(Path(hub_cache))),
                  Check("talker2code2wav", cannot_run="boson-multimodal has no v3 stage processor (v2 generation code)")]
    versions = {name: version(name) for name in ("boson-multimodal", "torch", "torchaudio", "transformers",
                                                  "descript-audio-codec", "vector-quantize-pytorch")}
    path = write_results("boson", versions, checks)
    print(json.dumps({"written": str(path)}))
    from conformance.differential.report import print_and_exit_status

    return print_and_exit_status("boson")


if __name__ == "__main__":
    sys.exit(main())
