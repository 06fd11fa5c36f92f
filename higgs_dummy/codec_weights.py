"""Seeded dummy weights for the bundled codec, in the real checkpoint's key layout.

    codec_config("tiny" | "4b") -> the `audio_tokenizer_config` dict of config.json
    codec_state_dict(cfg, seed) -> tensors named as in the real checkpoint after the prefix
                                   `tied.embedding.modality_embeddings.0.model.` (transformers layout,
                                   plain conv weights: transformers-format checkpoints fold weight norm)
    to_boson_layout(sd, cfg)    -> the same weights under boson-ai's `model.pth` names, conv weights
                                   split into weight_g / weight_v

"tiny" keeps the real RVQ and fc2 (8 x 1024 x 64 -> 1024 -> 256) and shrinks the DAC decoder to
64 channels, so a decode takes milliseconds on a CPU; "4b" is the real geometry (1024 channels).
Every tensor comes from its own generator seeded by (seed, name): same seed, bit-identical tensors.
The gains keep the decoded audio finite and unclipped (RMS ~0.1 on random codes, see GAINS).
"""

from __future__ import annotations

import hashlib

import torch

from reference.codec.config import CodecConfig
from reference.codec.layouts import boson_base, codec_slots

DECODER_WIDTH = {"tiny": 64, "4b": 1024}

# Standard deviation of each tensor family, in units of 1/sqrt(fan_in) for weights.
GAINS = {
    "codebook": 1.0,  # absolute std of the code vectors
    "project_out": 1.0,
    "fc2": 1.0 / 8**0.5,  # the input sums 8 codebooks
    "conv1": 1.0,
    "conv_t": 1.0,
    "res_conv1": 1.0,
    "res_conv2": 0.3,  # residual branches stay small beside the skip path
    "out_conv": 0.03,  # sets the output level
    "bias": 0.02,  # absolute std
    "snake_spread": 0.4,  # alpha ~ U(1 - spread, 1 + spread)
}


def codec_config(size: str) -> dict:
    """The `audio_tokenizer_config` for a fixture size ("tiny" or "4b")."""
    if size not in DECODER_WIDTH:
        raise ValueError(f"unknown codec size {size!r}: choose one of {sorted(DECODER_WIDTH)}")
    return CodecConfig(decoder_hidden_size=DECODER_WIDTH[size]).to_dict()


def _generator(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"codec:{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def _normal(seed: int, name: str, shape: tuple[int, ...], std: float) -> torch.Tensor:
    return torch.randn(shape, generator=_generator(seed, name), dtype=torch.float32) * std


def _weight_gain(base: str, kind: str) -> float:
    if kind == "conv_t":
        return GAINS["conv_t"]
    if base == "acoustic_decoder.conv1":
        return GAINS["conv1"]
    if base == "acoustic_decoder.conv2":
        return GAINS["out_conv"]
    if base == "fc2":
        return GAINS["fc2"]
    if base.endswith("project_out"):
        return GAINS["project_out"]
    return GAINS["res_conv2"] if base.endswith(".conv2") else GAINS["res_conv1"]


def _fan_in(kind: str, shape: tuple[int, ...]) -> int:
    if kind == "conv_t":  # [in, out, 2s] with stride s: each output sample sums in * 2 taps
        return shape[0] * 2
    fan = shape[1]
    for k in shape[2:]:
        fan *= k
    return fan


def codec_state_dict(cfg: dict, seed: int) -> dict[str, torch.Tensor]:
    """Float32 tensors for every decode-side codec weight (transformers layout, plain conv weights)."""
    geometry = CodecConfig.from_dict(cfg)
    sd: dict[str, torch.Tensor] = {}
    for slot in codec_slots(geometry):
        base, kind, shape = slot.base, slot.kind, slot.shape
        if kind == "codebook":
            sd[f"{base}.embed"] = _normal(seed, base, shape, GAINS["codebook"])
            continue
        if kind == "snake":
            u = torch.rand(shape, generator=_generator(seed, base), dtype=torch.float32)
            sd[f"{base}.alpha"] = 1.0 + GAINS["snake_spread"] * (2.0 * u - 1.0)
            continue
        std = _weight_gain(base, kind) / _fan_in(kind, shape) ** 0.5
        sd[f"{base}.weight"] = _normal(seed, f"{base}.weight", shape, std)
        bias_width = shape[1] if kind == "conv_t" else shape[0]
        sd[f"{base}.bias"] = _normal(seed, f"{base}.bias", (bias_width,), GAINS["bias"])
    return sd


def to_boson_layout(sd: dict[str, torch.Tensor], cfg: dict) -> dict[str, torch.Tensor]:
    """The same weights under boson-ai's `model.pth` names (decoder_2.*, quantizer.vq.layers.*, fc_post2.*).

    Decoder conv weights become weight_g [C, 1, 1] + weight_v with torch's weight-norm rule
    w = g * v / ||v|| (norm over all dims but 0); v is w scaled by a per-channel factor in [0.5, 2]
    so that a reader that skips the normalisation gets wrong audio.
    """
    geometry = CodecConfig.from_dict(cfg)
    num_blocks = len(geometry.upsampling_ratios)
    out: dict[str, torch.Tensor] = {}
    for slot in codec_slots(geometry):
        base = boson_base(slot.base, num_blocks)
        for name, tensor in sd.items():
            if not name.startswith(slot.base + "."):
                continue
            suffix = name.removeprefix(slot.base + ".")
            if slot.kind in ("conv", "conv_t") and suffix == "weight":
                dims = tuple(range(1, tensor.ndim))
                g = tensor.norm(dim=dims, keepdim=True)  # [C, 1, 1]
                scale = 0.5 + 1.5 * torch.rand(g.shape, generator=_generator(0, f"boson:{slot.base}"))
                out[f"{base}.weight_g"] = g
                out[f"{base}.weight_v"] = tensor * scale
            else:
                out[f"{base}.{suffix}"] = tensor
    return out
