"""Loading the audio tokenizer's encode-side tensors into `CodecEncoder`, by their real names.

Names are relative to the checkpoint prefix `tied.embedding.modality_embeddings.0.model.`:

    acoustic_encoder.*   transformers `DacEncoder` (conv1, block.{b}.{res_unit{1,2,3}.{snake1,conv1,
                         snake2,conv2}, snake1, conv1}, snake1, conv2); a conv weight may be plain
                         `weight`, `weight_g` + `weight_v`, or `parametrizations.weight.original0/1`
                         (folded here with torch's weight-norm rule, dim 0)
    semantic_model.*     transformers `HubertModel` (pos_conv_embed's weight norm as weight_g/weight_v,
                         parametrizations.weight.original0/1 or folded `weight`); masked_spec_embed ignored
    encoder_semantic.*   conv, conv_blocks.{i}.{res_units.{j}.{conv1,conv2}, conv}
    fc.{weight,bias}     1024 -> 1024
    quantizer.quantizers.{i}.{project_in,project_out}.{weight,bias}, .codebook.embed (or .weight)
"""

from __future__ import annotations

import torch
from torch import nn

from reference.codec.layouts import CodecWeightsError

_G_V = (("weight_g", "weight_v"), ("parametrizations.weight.original0", "parametrizations.weight.original1"))
POS_CONV = "encoder.pos_conv_embed.conv"


def _group(sd: dict[str, torch.Tensor], root: str) -> dict[str, torch.Tensor]:
    return {k.removeprefix(root): v for k, v in sd.items() if k.startswith(root)}


def _fold_weight_norm(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Convs stored as (g, v) -> plain `weight` = g * v / ||v|| (norm over all dims but 0)."""
    out = dict(sd)
    for g_name, v_name in _G_V:
        for key in [k for k in out if k.endswith("." + g_name)]:
            base = key.removesuffix("." + g_name)
            g, v = out.pop(key), out.pop(f"{base}.{v_name}")
            out[f"{base}.weight"] = torch._weight_norm(v, g, 0)
    return out


def _load(module: nn.Module, sd: dict[str, torch.Tensor], root: str, source: str) -> None:
    if not sd:
        raise CodecWeightsError(f"no audio tokenizer encoder tensors under {root!r}{source}: the checkpoint "
                                "bundles no encoder, so reference audio cannot be encoded (pass codes instead)")
    expected = module.state_dict()
    missing = sorted(root + k for k in expected if k not in sd)
    extra = sorted(root + k for k in sd if k not in expected)
    shapes = [f"{root}{k} {tuple(v.shape)} (expected {tuple(expected[k].shape)})"
              for k, v in sd.items() if k in expected and v.shape != expected[k].shape]
    problems = [f"missing: {missing[:8]}{' ...' if len(missing) > 8 else ''}"] if missing else []
    problems += [f"unexpected: {extra[:8]}{' ...' if len(extra) > 8 else ''}"] if extra else []
    problems += [f"misshaped: {shapes[:8]}"] if shapes else []
    if problems:
        raise CodecWeightsError(f"audio tokenizer encoder tensors under {root!r}{source} do not match "
                                f"audio_tokenizer_config: " + "; ".join(problems))
    module.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)


def _hubert_tensors(encoder: nn.Module, sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    sd = {k: v for k, v in sd.items() if k != "masked_spec_embed"}
    if f"{POS_CONV}.weight_g" in sd:  # torch's old weight_norm names -> the parametrization's
        sd[f"{POS_CONV}.parametrizations.weight.original0"] = sd.pop(f"{POS_CONV}.weight_g")
        sd[f"{POS_CONV}.parametrizations.weight.original1"] = sd.pop(f"{POS_CONV}.weight_v")
    if f"{POS_CONV}.weight" in sd:  # already folded: drop the module's parametrization
        conv = encoder.semantic_model.encoder.pos_conv_embed.conv
        if hasattr(conv, "parametrizations"):
            torch.nn.utils.parametrize.remove_parametrizations(conv, "weight", leave_parametrized=False)
    return sd


def load_encoder_tensors(encoder: nn.Module, sd: dict[str, torch.Tensor], source: str = "") -> None:
    """Copies every encode-side tensor into `encoder`; CodecWeightsError names what is missing or misshaped."""
    _load(encoder.acoustic_encoder, _fold_weight_norm(_group(sd, "acoustic_encoder.")), "acoustic_encoder.", source)
    _load(encoder.semantic_model, _hubert_tensors(encoder, _group(sd, "semantic_model.")), "semantic_model.", source)
    _load(encoder.encoder_semantic, _group(sd, "encoder_semantic."), "encoder_semantic.", source)
    _load(encoder.fc, _group(sd, "fc."), "fc.", source)
    c = encoder.cfg.codec
    missing = []
    with torch.no_grad():
        for q in range(c.num_codebooks):
            p = f"quantizer.quantizers.{q}."
            for name, module in (("project_in", encoder.project_in[q]), ("project_out", encoder.project_out[q])):
                group = _group(sd, f"{p}{name}.")
                if not group:
                    missing.append(f"{p}{name}.{{weight,bias}}")
                    continue
                _load(module, group, f"{p}{name}.", source)
            embed = sd.get(f"{p}codebook.embed", sd.get(f"{p}codebook.weight"))
            if embed is None:
                missing.append(f"{p}codebook.embed")
            elif tuple(embed.shape) != (c.codebook_size, c.codebook_dim):
                raise CodecWeightsError(f"{p}codebook.embed{source} has shape {tuple(embed.shape)}, "
                                        f"expected {(c.codebook_size, c.codebook_dim)}")
            else:
                encoder.codebooks[q].copy_(embed)
    if missing:
        raise CodecWeightsError(f"audio tokenizer quantizer tensors missing{source}: {missing[:8]}"
                                f"{' ...' if len(missing) > 8 else ''}")
