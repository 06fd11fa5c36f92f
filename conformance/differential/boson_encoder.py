"""The encoder check against boson-multimodal's HiggsAudioTokenizer.encode (diff-boson only).

Boson's tokenizer fixes the encoder's geometry in its constructor (a 64-channel DAC encoder, two
768-channel semantic blocks, HuBERT base as the teacher), which is the dummy's "4b" size
(higgs_dummy.encoder_weights): so this check runs on the 4b encoder dummy, seed 0, with the 4b
codec's codebooks. The tensors are renamed into boson's `model.pth` layout here (the rule below,
read from the two key lists, written out once); the HuBERT teacher, which boson loads from the hub
by name, goes into the adapter's private offline hub cache under that name.

Transformers layout (ours)                         boson layout
    acoustic_encoder.conv1                         encoder.block.0
    acoustic_encoder.block.b.res_unitU.X           encoder.block.(b+1).block.(U-1).block.i
                                                   (X = snake1 conv1 snake2 conv2 -> i = 0 1 2 3)
    acoustic_encoder.block.b.{snake1, conv1}       encoder.block.(b+1).block.{3, 4}
    acoustic_encoder.{snake1, conv2}               encoder.block.{6, 7}
    encoder_semantic.(conv | .conv | .conv1)       the same, one `.conv` deeper (its Conv1d wrapper)
    fc                                             fc_prior
    quantizer.quantizers.i.project_in              quantizer.vq.layers.i.project_in
Acoustic conv weights become weight_g / weight_v (weight norm, g = ||w|| over all but dim 0, v = w);
every codebook is marked initialised (`_codebook.inited`, as in a trained model.pth).
Ours: reference.codec.encoder.CodecEncoder on the same tensors. Exact: every code equal.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from conformance.differential.inputs import encoder_clips
from conformance.differential.verdicts import Check

SIZE, SEED = "4b", 0
RES_UNIT = {"snake1": 0, "conv1": 1, "snake2": 2, "conv2": 3}


def _acoustic_name(name: str) -> str:
    rest = name.removeprefix("acoustic_encoder.")
    if m := re.fullmatch(r"block\.(\d+)\.res_unit(\d)\.(\w+)\.(\w+)", rest):
        b, u, part, leaf = m.groups()
        return f"encoder.block.{int(b) + 1}.block.{int(u) - 1}.block.{RES_UNIT[part]}.{leaf}"
    if m := re.fullmatch(r"block\.(\d+)\.(snake1|conv1)\.(\w+)", rest):
        b, part, leaf = m.groups()
        return f"encoder.block.{int(b) + 1}.block.{3 if part == 'snake1' else 4}.{leaf}"
    part, leaf = rest.split(".")
    return f"encoder.block.{ {'conv1': 0, 'snake1': 6, 'conv2': 7}[part] }.{leaf}"


def to_boson_encoder(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Encode-side tensors (transformers layout, without semantic_model.*) -> boson's names."""
    out = {}
    for name, tensor in state.items():
        if name.startswith("acoustic_encoder."):
            target = _acoustic_name(name)
            if target.endswith(".weight") and tensor.ndim == 3:
                base = target.removesuffix(".weight")
                out[f"{base}.weight_g"] = tensor.norm(dim=(1, 2), keepdim=True)
                out[f"{base}.weight_v"] = tensor
                continue
            out[target] = tensor
        elif name.startswith("encoder_semantic."):
            out[re.sub(r"(\.conv|\.conv1)\.(weight|bias)$", r"\1.conv.\2", name)] = tensor
        elif name.startswith("fc."):
            out["fc_prior." + name.removeprefix("fc.")] = tensor
        elif m := re.fullmatch(r"quantizer\.quantizers\.(\d+)\.project_in\.(\w+)", name):
            out[f"quantizer.vq.layers.{m[1]}.project_in.{m[2]}"] = tensor
        elif not name.startswith("semantic_model."):
            raise ValueError(f"no boson name for encoder tensor {name}")
    return out


def dummy_encoder() -> tuple[dict, dict[str, torch.Tensor]]:
    """(the 4b config with encoder fields, codec + encoder tensors in the transformers layout)."""
    from higgs_dummy.codec_weights import codec_config, codec_state_dict
    from higgs_dummy.encoder_weights import encoder_state_dict, with_encoder_config

    cfg = with_encoder_config(codec_config(SIZE), SIZE)
    return cfg, {**codec_state_dict(codec_config(SIZE), SEED), **encoder_state_dict(SIZE, SEED)}


def write_hubert(cfg: dict, state: dict[str, torch.Tensor], snapshot: Path) -> None:
    """Our dummy's HuBERT teacher as a transformers checkpoint folder (for boson's hub lookup)."""
    from transformers import HubertConfig, HubertModel

    fields = {k: v for k, v in cfg["semantic_model_config"].items() if k != "model_type"}
    model = HubertModel(HubertConfig(**fields))
    teacher = {k.removeprefix("semantic_model."): v for k, v in state.items() if k.startswith("semantic_model.")}
    missing, unexpected = model.load_state_dict(teacher, strict=False)
    if unexpected or [k for k in missing if "masked_spec_embed" not in k]:
        raise RuntimeError(f"HuBERT tensors do not load: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.save_pretrained(snapshot)


def boson_encoder(cfg: dict, state: dict[str, torch.Tensor]):
    from boson_multimodal.audio_processing.higgs_audio_tokenizer import HiggsAudioTokenizer

    from higgs_dummy.codec_weights import to_boson_layout

    acoustic = cfg["acoustic_model_config"]
    tokenizer = HiggsAudioTokenizer(D=acoustic["hidden_size"], ratios=list(acoustic["downsampling_ratios"]),
                                    sample_rate=cfg["sample_rate"], bins=1024, n_q=cfg["num_codebooks"],
                                    codebook_dim=cfg["codebook_dim"], semantic_techer="hubert_base",
                                    semantic_sample_rate=cfg["semantic_sample_rate"], device="cpu")
    decode_side = {k: v for k, v in state.items() if k.startswith(("quantizer.", "fc2.", "acoustic_decoder."))
                   and ".project_in." not in k}
    encode_side = {k: v for k, v in state.items()
                   if k.startswith(("acoustic_encoder.", "encoder_semantic.", "fc.")) or ".project_in." in k}
    tensors = {**to_boson_layout(decode_side, cfg), **to_boson_encoder(encode_side)}
    # A trained model.pth marks its codebooks initialised; left at False, boson's first encode would
    # re-initialise them by k-means on the input (quantization/core_vq.py, `inited`).
    for q in range(cfg["num_codebooks"]):
        tensors[f"quantizer.vq.layers.{q}._codebook.inited"] = torch.ones(1)
    result = tokenizer.load_state_dict(tensors, strict=False)
    needed = [k for k in result.missing_keys if k.startswith(("encoder.", "encoder_semantic.", "fc_prior.", "quantizer."))
              and not k.endswith(("cluster_size", "embed_avg"))]
    if needed or result.unexpected_keys:
        raise RuntimeError(f"boson encoder layout does not load: missing {needed[:5]}, unexpected {result.unexpected_keys[:5]}")
    return tokenizer.eval()


# When the acoustic and semantic frame counts differ, ours (as transformers' port, whose encode
# vllm-omni's v3 uses for reference audio) pads hop // 2 = 480 samples a side; boson pads
# 160 * semantic_downsample_factor = 320. The variant is ours with that one number changed.
BOSON_PAD = 320


def ours_padded(ours, wav: np.ndarray, pad: int) -> np.ndarray:
    """Our encoder's own steps (reference.codec.encoder.CodecEncoder.encode) with `pad` samples a side."""
    import torch.nn.functional as F

    x = torch.from_numpy(wav)[None, None]
    with torch.no_grad():
        semantic = ours.semantic_features(x)
        acoustic = ours.acoustic_encoder(F.pad(x, (pad, pad)))[:, :, : semantic.shape[2]]
        embeddings = ours.fc(torch.cat([acoustic, semantic], dim=1).transpose(1, 2)).transpose(1, 2)
        return ours.quantize(embeddings).numpy()


def run(hub_snapshot: Path) -> Check:
    """hub_snapshot: where boson's HuBERT lookup (facebook/hubert-base-ls960) finds its files."""
    from reference.codec.encoder import CodecEncoder

    cfg, state = dummy_encoder()
    write_hubert(cfg, state, hub_snapshot)
    tokenizer = boson_encoder(cfg, state)
    ours = CodecEncoder.from_state_dict(cfg, state)
    rate, clips = encoder_clips()
    check = Check("encoder_codes", f"exact: every code equal ({SIZE} encoder dummy, seed {SEED}: boson's fixed geometry)")
    for clip_id, wav in clips:
        with torch.no_grad():
            mine = ours.encode(torch.from_numpy(wav), rate).numpy()
            try:
                theirs = np.asarray(tokenizer.encode(wav, sr=rate))
            except Exception as exc:  # noqa: BLE001 (a foreign refusal is a result)
                check.add(clip_id, "raises", f"{type(exc).__name__}: {exc}; ours {mine.shape[1]} frames")
                continue
        if theirs.shape != mine.shape:
            check.add(clip_id, "frame_count", f"ours {mine.shape}, theirs {theirs.shape}")
        elif not np.array_equal(theirs, mine):
            cells = np.argwhere(theirs != mine)
            where = f"{len(cells)}/{mine.size} codes differ, first at (codebook, frame) {tuple(int(i) for i in cells[0])}"
            if np.array_equal(theirs, ours_padded(ours, wav, BOSON_PAD)):
                check.add(clip_id, "acoustic_pad_320", f"{where}; equal to ours with the audio padded by "
                                                        f"{BOSON_PAD} samples a side before the acoustic encoder")
            else:
                check.add(clip_id, "codes", where)
        else:
            check.add(clip_id, None, f"{mine.shape[1]} frames x 8 codes equal")
    return check
