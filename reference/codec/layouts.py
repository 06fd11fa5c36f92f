"""The two key layouts of the bundled codec's decode-side tensors, and reading either one.

Names below are relative to the checkpoint prefix `tied.embedding.modality_embeddings.0.model.`.

"transformers" (transformers' `HiggsAudioV2TokenizerModel`, what upstream's v3 loader reads):
    quantizer.quantizers.{i}.codebook.embed (or .codebook.weight)   [1024, 64]
    quantizer.quantizers.{i}.project_out.{weight,bias}              [1024, 64], [1024]
    fc2.{weight,bias}                                               [256, 1024], [256]
    acoustic_decoder.conv1 | block.{b}.{snake1,conv_t1,res_unit{1,2,3}.{snake1,conv1,snake2,conv2}}
                     | snake1 | conv2                              (transformers `DacDecoder`)

"boson" (boson-ai's original `model.pth` of the Higgs v2 tokenizer, weight-norm factors kept):
    quantizer.vq.layers.{i}._codebook.embed, quantizer.vq.layers.{i}.project_out.{weight,bias}
    fc_post2.{weight,bias} (or fc2.*)
    decoder_2.model.{0: conv1, 1..5: blocks, 6: snake1, 7: conv2} (or acoustic_decoder.model.*);
    block b is model.{b+1}.block.{0: snake1, 1: conv_t1, 2..4: residual units}, a residual unit
    is .block.{0: snake1, 1: conv1, 2: snake2, 3: conv2}.

A conv weight may be stored plain (`weight`, what transformers-format checkpoints hold: their
converters fold weight norm), as `weight_g` + `weight_v` (torch's old weight_norm, boson-ai's
files), or as `parametrizations.weight.original0` + `original1` (torch's parametrized weight_norm).
Every form is read; conv weights come back as `{base}.weight` or `{base}.weight_g` + `{base}.weight_v`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from reference.codec.config import CodecConfig

TRANSFORMERS = "transformers"
BOSON = "boson"
_RES_UNIT_PARTS = ("snake1", "conv1", "snake2", "conv2")


class CodecWeightsError(ValueError):
    """The codec tensors are missing, misnamed or misshaped."""


@dataclass(frozen=True)
class Slot:
    """One decode-side module's tensors, under its transformers-layout base name."""

    base: str
    kind: str  # "conv" | "conv_t" | "snake" | "linear" | "codebook"
    shape: tuple[int, ...]  # weight (conv, conv_t, linear), alpha (snake) or embed (codebook)


def codec_slots(cfg: CodecConfig) -> list[Slot]:
    """Every tensor the decode path needs, in the transformers layout."""
    slots = []
    for i in range(cfg.num_codebooks):
        slots.append(Slot(f"quantizer.quantizers.{i}.codebook", "codebook", (cfg.codebook_size, cfg.codebook_dim)))
        slots.append(Slot(f"quantizer.quantizers.{i}.project_out", "linear", (cfg.hidden_size, cfg.codebook_dim)))
    slots.append(Slot("fc2", "linear", (cfg.acoustic_hidden_size, cfg.hidden_size)))
    width = cfg.decoder_hidden_size
    slots.append(Slot("acoustic_decoder.conv1", "conv", (width, cfg.acoustic_hidden_size, 7)))
    for b, stride in enumerate(cfg.upsampling_ratios):
        p = f"acoustic_decoder.block.{b}"
        slots.append(Slot(f"{p}.snake1", "snake", (1, width, 1)))
        slots.append(Slot(f"{p}.conv_t1", "conv_t", (width, width // 2, 2 * stride)))
        width //= 2
        for u in (1, 2, 3):
            slots.append(Slot(f"{p}.res_unit{u}.snake1", "snake", (1, width, 1)))
            slots.append(Slot(f"{p}.res_unit{u}.conv1", "conv", (width, width, 7)))
            slots.append(Slot(f"{p}.res_unit{u}.snake2", "snake", (1, width, 1)))
            slots.append(Slot(f"{p}.res_unit{u}.conv2", "conv", (width, width, 1)))
    slots.append(Slot("acoustic_decoder.snake1", "snake", (1, width, 1)))
    slots.append(Slot("acoustic_decoder.conv2", "conv", (1, width, 7)))
    return slots


def boson_base(base: str, num_blocks: int) -> str:
    """A transformers-layout base name -> the boson-ai `model.pth` base name."""
    if m := re.fullmatch(r"quantizer\.quantizers\.(\d+)\.codebook", base):
        return f"quantizer.vq.layers.{m[1]}._codebook"
    if m := re.fullmatch(r"quantizer\.quantizers\.(\d+)\.(project_out)", base):
        return f"quantizer.vq.layers.{m[1]}.{m[2]}"
    if base == "fc2":
        return "fc_post2"
    fixed = {"acoustic_decoder.conv1": "decoder_2.model.0",
             "acoustic_decoder.snake1": f"decoder_2.model.{num_blocks + 1}",
             "acoustic_decoder.conv2": f"decoder_2.model.{num_blocks + 2}"}
    if base in fixed:
        return fixed[base]
    if m := re.fullmatch(r"acoustic_decoder\.block\.(\d+)\.(snake1|conv_t1)", base):
        return f"decoder_2.model.{int(m[1]) + 1}.block.{0 if m[2] == 'snake1' else 1}"
    if m := re.fullmatch(r"acoustic_decoder\.block\.(\d+)\.res_unit([123])\.(\w+)", base):
        return f"decoder_2.model.{int(m[1]) + 1}.block.{int(m[2]) + 1}.block.{_RES_UNIT_PARTS.index(m[3])}"
    raise ValueError(f"no boson-layout name for {base!r}")


def detect_layout(names: set[str] | list[str]) -> str:
    """'boson' when any boson-only name is present, else 'transformers'."""
    boson_roots = ("quantizer.vq.layers.", "decoder_2.", "acoustic_decoder.model.", "fc_post2.")
    return BOSON if any(n.startswith(boson_roots) for n in names) else TRANSFORMERS


def _candidate_bases(slot: Slot, layout: str, num_blocks: int) -> list[str]:
    if layout == TRANSFORMERS:
        return [slot.base]
    base = boson_base(slot.base, num_blocks)
    if base.startswith("decoder_2."):
        return [base, "acoustic_decoder." + base.removeprefix("decoder_2.")]
    if base == "fc_post2":
        return [base, "fc2"]
    return [base]


_WEIGHT_FORMS = (
    ("weight",),
    ("weight_g", "weight_v"),
    ("parametrizations.weight.original0", "parametrizations.weight.original1"),
)


def _suffix_options(kind: str, layout: str) -> list[tuple[str, ...]]:
    if kind == "snake":
        return [("alpha",)]
    if kind == "codebook":
        return [("embed",)] if layout == BOSON else [("embed",), ("weight",)]
    if kind == "linear":
        return [("weight",)]
    return list(_WEIGHT_FORMS)


def _describe(bases: list[str], options: list[tuple[str, ...]]) -> str:
    forms = " | ".join("+".join(f".{s}" for s in opt) for opt in options)
    return f"{bases[0]}{{{forms}}}" + (f" (or under {', '.join(bases[1:])})" if len(bases) > 1 else "")


def _check_shape(name: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> None:
    if tuple(tensor.shape) != tuple(shape):
        raise CodecWeightsError(f"codec tensor {name} has shape {tuple(tensor.shape)}, expected {tuple(shape)}")


def to_canonical(
    sd: dict[str, torch.Tensor], cfg: CodecConfig, prefix_note: str = ""
) -> tuple[str, dict[str, torch.Tensor]]:
    """Any supported layout -> (layout name, tensors under transformers-layout names).

    Raises CodecWeightsError naming every missing tensor and the layout it tried.
    """
    layout = detect_layout(list(sd))
    num_blocks = len(cfg.upsampling_ratios)
    out: dict[str, torch.Tensor] = {}
    missing: list[str] = []
    used: set[str] = set()
    for slot in codec_slots(cfg):
        bases = _candidate_bases(slot, layout, num_blocks)
        options = _suffix_options(slot.kind, layout)
        found = next(((b, opt) for b in bases for opt in options if all(f"{b}.{s}" in sd for s in opt)), None)
        needs_bias = slot.kind in ("conv", "conv_t", "linear")
        if found is None or (needs_bias and f"{found[0]}.bias" not in sd):
            what = _describe(bases, options) if found is None else f"{found[0]}.bias"
            missing.append(what + (" and .bias" if found is None and needs_bias else ""))
            continue
        b, opt = found
        tensors = [sd[f"{b}.{s}"] for s in opt]
        used.update(f"{b}.{s}" for s in opt)
        if slot.kind == "snake":
            _check_shape(f"{b}.alpha", tensors[0], slot.shape)
            out[f"{slot.base}.alpha"] = tensors[0]
        elif slot.kind == "codebook":
            _check_shape(f"{b}.{opt[0]}", tensors[0], slot.shape)
            out[f"{slot.base}.embed"] = tensors[0]
        elif len(opt) == 1:
            _check_shape(f"{b}.weight", tensors[0], slot.shape)
            out[f"{slot.base}.weight"] = tensors[0]
        else:
            g, v = tensors
            _check_shape(f"{b}.{opt[1]}", v, slot.shape)
            _check_shape(f"{b}.{opt[0]}", g, (slot.shape[0],) + (1,) * (len(slot.shape) - 1))
            out[f"{slot.base}.weight_g"], out[f"{slot.base}.weight_v"] = g, v
        if needs_bias:
            bias = sd[f"{b}.bias"]
            used.add(f"{b}.bias")
            bias_width = slot.shape[1] if slot.kind == "conv_t" else slot.shape[0]
            _check_shape(f"{b}.bias", bias, (bias_width,))
            out[f"{slot.base}.bias"] = bias
    if missing:
        shown = "\n  ".join(missing[:12]) + (f"\n  ... and {len(missing) - 12} more" if len(missing) > 12 else "")
        raise CodecWeightsError(
            f"codec weights incomplete for the {layout!r} key layout{prefix_note}: {len(missing)} missing:\n  {shown}"
        )
    decoder_roots = ("acoustic_decoder.", "decoder_2.")
    extra = sorted(n for n in sd if n.startswith(decoder_roots) and n not in used)
    if extra:
        raise CodecWeightsError(
            f"codec decoder tensors not used by a {num_blocks}-block decoder ({layout!r} layout){prefix_note}: "
            f"{extra[:8]}{' ...' if len(extra) > 8 else ''}; check upsampling_ratios in audio_tokenizer_config"
        )
    return layout, out
