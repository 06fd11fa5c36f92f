"""Seeded dummy weights for the bundled audio tokenizer's encode side, under the real names.

    encoder_config(size)            -> the encode-side fields of `audio_tokenizer_config`
    with_encoder_config(cfg, size)  -> a codec `audio_tokenizer_config` with those fields merged in
    encoder_state_dict(size, seed)  -> tensors named as in the real checkpoint after the prefix
                                       `tied.embedding.modality_embeddings.0.model.`:
                                       acoustic_encoder.*, semantic_model.*, encoder_semantic.*, fc.*,
                                       quantizer.quantizers.{i}.project_in.*

The codebooks and project_out come from higgs_dummy.codec_weights (the decode side shares them).
"4b" is the real geometry (DAC encoder from 64 channels, HuBERT base, two semantic blocks); "tiny"
keeps every width the RVQ sees (256 acoustic + 768 semantic = 1024) but has a 4-channel DAC encoder,
a 2-layer HuBERT with 16-channel feature convs and one semantic block, so a 1 s encode takes well
under a second on a CPU. The HuBERT feature convs keep the real kernels and strides (320 samples
per feature at 16 kHz), so frame counts follow the real rule.
Every tensor comes from its own generator seeded by (seed, name): same seed, bit-identical tensors.
"""

from __future__ import annotations

import copy
import hashlib

import torch
from torch import nn

HUBERT = {
    "tiny": dict(hidden_size=768, num_hidden_layers=2, num_attention_heads=12, intermediate_size=256,
                 conv_dim=[16] * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=16),
    "4b": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
               conv_dim=[512] * 7, num_conv_pos_embeddings=128, num_conv_pos_embedding_groups=16),
}
HUBERT_COMMON = dict(model_type="hubert", conv_kernel=[10, 3, 3, 3, 3, 2, 2], conv_stride=[5, 2, 2, 2, 2, 2, 2],
                     conv_bias=False, feat_extract_norm="group", do_stable_layer_norm=False,
                     feat_proj_layer_norm=True, hidden_act="gelu", mask_time_prob=0.0)
ENCODER_WIDTH = {"tiny": 4, "4b": 64}  # DAC encoder_hidden_size: channels double in each of 5 blocks
SEMANTIC_BLOCKS = {"tiny": 1, "4b": 2}

# Standard deviation in units of 1/sqrt(fan_in) (keeps activations near unit scale).
GAINS = {"weight": 1.0, "res_conv2": 0.3, "bias": 0.02, "snake_spread": 0.4}


def encoder_config(size: str) -> dict:
    """Encode-side `audio_tokenizer_config` fields (transformers' HiggsAudioV2TokenizerConfig names)."""
    if size not in HUBERT:
        raise ValueError(f"unknown encoder size {size!r}: choose one of {sorted(HUBERT)}")
    blocks = SEMANTIC_BLOCKS[size]
    return {
        "acoustic_model_config": {"encoder_hidden_size": ENCODER_WIDTH[size],
                                  "downsampling_ratios": [8, 5, 4, 2, 3]},
        "semantic_model_config": {**HUBERT_COMMON, **HUBERT[size]},
        "semantic_sample_rate": 16000,
        "downsample_factor": 320,
        "kernel_size": 3,
        "channel_ratios": [1] * blocks,
        "strides": [1] * blocks,
        "block_dilations": [1, 1],
        "unit_kernel_size": 3,
        # 25 frames/s x 10 bits: 2 kbps = the 8 quantizers the checkpoint holds (transformers'
        # num_quantizers = 1000 * target_bandwidths[-1] // 250).
        "target_bandwidths": [0.5, 1, 1.5, 2],
    }


def with_encoder_config(audio_tokenizer_config: dict, size: str) -> dict:
    """A copy of the codec's `audio_tokenizer_config` with the encode-side fields merged in."""
    out = copy.deepcopy(audio_tokenizer_config)
    for key, value in encoder_config(size).items():
        if isinstance(value, dict):
            out[key] = {**out.get(key, {}), **value}
        else:
            out[key] = value
    return out


def _generator(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"encoder:{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def _modules(size: str) -> dict[str, nn.Module]:
    """The encode-side modules by checkpoint root, built on the meta device for names and shapes."""
    from higgs_dummy.codec_weights import codec_config
    from reference.codec.encoder import CodecEncoder, EncoderConfig

    cfg = EncoderConfig.from_dict(with_encoder_config(codec_config(size), size))
    with torch.device("meta"):
        enc = CodecEncoder(cfg)
    roots = {"acoustic_encoder.": enc.acoustic_encoder, "semantic_model.": enc.semantic_model,
             "encoder_semantic.": enc.encoder_semantic, "fc.": enc.fc}
    roots.update({f"quantizer.quantizers.{q}.project_in.": m for q, m in enumerate(enc.project_in)})
    return roots


def _draw(seed: int, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    gen = _generator(seed, name)
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "alpha":  # Snake
        return 1.0 + GAINS["snake_spread"] * (2.0 * torch.rand(shape, generator=gen) - 1.0)
    if leaf == "original0" or name.endswith(("layer_norm.weight", "layer_norm.bias")):
        # pos-conv weight-norm gain / LayerNorm + GroupNorm: ones-like weights, small biases
        if leaf == "bias":
            return torch.randn(shape, generator=gen) * GAINS["bias"]
        return 1.0 + 0.1 * torch.randn(shape, generator=gen)
    if leaf == "bias" or len(shape) == 1:
        return torch.randn(shape, generator=gen) * GAINS["bias"]
    fan_in = 1
    for d in shape[1:]:
        fan_in *= d
    gain = GAINS["res_conv2"] if ".res_unit" in name and name.endswith("conv2.weight") else GAINS["weight"]
    return torch.randn(shape, generator=gen) * (gain / fan_in**0.5)


def encoder_state_dict(size: str, seed: int) -> dict[str, torch.Tensor]:
    """Float32 tensors for every encode-side weight, under the real names (HuBERT's pos conv kept as
    weight norm: parametrizations.weight.original0 [1, 1, K] and original1, as transformers saves it)."""
    sd: dict[str, torch.Tensor] = {}
    for root, module in _modules(size).items():
        for name, tensor in module.state_dict().items():
            full = root + name
            sd[full] = _draw(seed, full, tuple(tensor.shape)).float().contiguous()
    return sd
