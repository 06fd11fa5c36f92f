"""Writes a dummy Higgs Audio v3 checkpoint folder in the real layout, from a seed.

    python -m higgs_dummy OUT_DIR [--size tiny|4b] [--seed 0] [--flavour greedy|sampling|no_eoc]

Same size and seed give byte-identical files. The weights are random but shaped so that greedy
decoding is decisive (large top-1/top-2 logit margins: the final norm is scaled up) and so that
codebook 0 picks EOC after a few dozen frames (its EOC row is scaled), which makes token-exact
comparisons between runners meaningful and lets requests run through the ramp-down to EOS.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from higgs_dummy.tokenizer import write_tokenizer
from reference.talker.config import ARCHITECTURE, MODEL_TYPE

# Own copies of the format's constants, on purpose: the dummy writer states the real format independently of reference/.
NUM_CODEBOOKS = 8
CODEBOOK_VOCAB = 1026  # 1024 codes + BOC + EOC
BOC, EOC = 1024, 1025
CODEC_PREFIX = "tied.embedding.modality_embeddings.0.model."

TEXT_CONFIGS = {
    "tiny": dict(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=4096,
    ),
    "4b": dict(
        vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
    ),
}
DTYPES = {"tiny": torch.float32, "4b": torch.bfloat16}
# Flavours: (scale of the final RMSNorm weight, norm of codebook 0's EOC row relative to the
# other rows). "greedy": audio logits spread over thousands, so the smallest greedy top-1/top-2
# margin over a whole request stays around 1 or more, and EOC comes after 10 to 70 frames for
# short English prompts (tiny, seed 0). "sampling": logits of order 10, so that temperatures vLLM
# accepts (<= 2) really sample. "no_eoc": EOC never wins, every request runs to max_tokens
# (fixed-length benchmarks).
# The tie flavours switch one of the config's tie flags against the greedy flavour: the text head
# tied to the text embedding (no `tied.head.text_head.weight`), or an audio head of its own
# (`tied.head.modality_heads.0.weight` drawn apart from the fused codebook table).


@dataclass(frozen=True)
class Flavour:
    norm_scale: float
    eoc_gain: float
    text_head_tied: bool = False
    audio_head_tied: bool = True


FLAVOURS = {
    "greedy": Flavour(3200.0, 1.8),
    "sampling": Flavour(8.0, 1.8),
    "no_eoc": Flavour(3200.0, 0.0),
    "tied_text_head": Flavour(3200.0, 1.8, text_head_tied=True),
    "untied_audio_head": Flavour(3200.0, 1.8, audio_head_tied=False),
}
# config.json's transformers_version: present in every checkpoint transformers writes; without it
# transformers 5 takes a local tokenizer for an old Mistral one and warns ("fix_mistral_regex").
TRANSFORMERS_VERSION = "5.19.0"
# Gain of the blocks' output projections: a residual stream dominated by the blocks keeps the
# tied audio head from simply repeating the codes it was fed.
BLOCK_OUT_GAIN = 20.0
SHARD_BYTES = 4 * 1024**3


def _generator(seed: int, name: str) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def _normal(seed: int, name: str, shape: tuple[int, ...], std: float) -> torch.Tensor:
    return torch.randn(shape, generator=_generator(seed, name)) * std


def talker_state_dict(size: str, seed: int, flavour: str = "greedy",
                      dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """The talker's tensors under the real checkpoint's names, drawn in float32 and stored in
    `dtype` one by one (the 4b size would need 16 GB in float32 at once)."""
    c = TEXT_CONFIGS[size]
    d, heads, kv, hd, ff = (c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"],
                            c["head_dim"], c["intermediate_size"])
    sd: dict[str, torch.Tensor] = {}

    def linear(name: str, out_features: int, in_features: int, gain: float = 1.0) -> None:
        sd[name] = _normal(seed, name, (out_features, in_features), gain * in_features**-0.5).to(dtype)

    sd["tied.embedding.text_embedding.weight"] = _normal(seed, "text_embedding", (c["vocab_size"], d), 1.0).to(dtype)
    for i in range(c["num_hidden_layers"]):
        p = f"body.layers.{i}."
        linear(p + "self_attn.q_proj.weight", heads * hd, d)
        linear(p + "self_attn.k_proj.weight", kv * hd, d)
        linear(p + "self_attn.v_proj.weight", kv * hd, d)
        linear(p + "self_attn.o_proj.weight", d, heads * hd, BLOCK_OUT_GAIN)
        linear(p + "mlp.gate_proj.weight", ff, d)
        linear(p + "mlp.up_proj.weight", ff, d)
        linear(p + "mlp.down_proj.weight", d, ff, BLOCK_OUT_GAIN)
        for norm, width in (("self_attn.q_norm", hd), ("self_attn.k_norm", hd),
                            ("input_layernorm", d), ("post_attention_layernorm", d)):
            sd[p + norm + ".weight"] = torch.ones(width, dtype=dtype)
    f = FLAVOURS[flavour]
    sd["body.norm.weight"] = torch.full((d,), f.norm_scale, dtype=dtype)
    if not f.text_head_tied:
        linear("tied.head.text_head.weight", c["vocab_size"], d)

    def audio_table(name: str) -> torch.Tensor:
        table = _normal(seed, name, (NUM_CODEBOOKS * CODEBOOK_VOCAB, d), d**-0.5)
        table[EOC] *= f.eoc_gain  # codebook 0's EOC row
        return table.to(dtype)

    audio = audio_table("audio_embedding")
    sd["tied.embedding.modality_embeddings.0.embedding.weight"] = audio
    # A tied checkpoint stores the audio head too, equal to the table (the loader ignores it).
    sd["tied.head.modality_heads.0.weight"] = audio.clone() if f.audio_head_tied else audio_table("audio_head")
    return sd


def checkpoint_config(size: str, flavour: str = "greedy") -> dict:
    from higgs_dummy.codec_weights import codec_config
    from higgs_dummy.encoder_weights import with_encoder_config

    f = FLAVOURS[flavour]
    text = dict(TEXT_CONFIGS[size], model_type="qwen3", rms_norm_eps=1e-6, rope_theta=1_000_000.0,
                hidden_act="silu", attention_bias=False, tie_word_embeddings=f.text_head_tied,
                torch_dtype=str(DTYPES[size]).removeprefix("torch."))
    return {
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURE],
        "text_config": text,
        "audio_encoder_config": {"encoder_type": "discrete", "num_codebooks": NUM_CODEBOOKS,
                                 "vocab_size": CODEBOOK_VOCAB, "tie_word_embeddings": f.audio_head_tied},
        "audio_tokenizer_config": with_encoder_config(codec_config(size), size),
        "audio_stream_bos_id": BOC,
        "audio_stream_eos_id": EOC,
        "sample_rate": 24000,
        "frame_rate": 25,
        "torch_dtype": text["torch_dtype"],
        "tie_word_embeddings": False,
        "transformers_version": TRANSFORMERS_VERSION,
    }


def _save_shards(tensors: dict[str, torch.Tensor], out_dir: Path) -> None:
    shards: list[dict[str, torch.Tensor]] = [{}]
    used = 0
    for name in sorted(tensors):
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if shards[-1] and used + nbytes > SHARD_BYTES:
            shards.append({})
            used = 0
        shards[-1][name] = tensors[name]
        used += nbytes
    if len(shards) == 1:
        save_file(shards[0], str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        return
    weight_map = {}
    for i, shard in enumerate(shards, start=1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out_dir / fname), metadata={"format": "pt"})
        weight_map.update({name: fname for name in shard})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, sort_keys=True, indent=1))


def write_checkpoint(out_dir: str | Path, size: str = "tiny", seed: int = 0, flavour: str = "greedy") -> Path:
    """Writes config.json, the tokenizer and the safetensors into `out_dir` and returns it."""
    from higgs_dummy.codec_weights import codec_state_dict
    from higgs_dummy.encoder_weights import encoder_state_dict

    if size not in TEXT_CONFIGS:
        raise ValueError(f"unknown checkpoint size {size!r}: choose one of {sorted(TEXT_CONFIGS)}")
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown checkpoint flavour {flavour!r}: choose one of {sorted(FLAVOURS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = checkpoint_config(size, flavour)
    (out / "config.json").write_text(json.dumps(config, sort_keys=True, indent=1))
    write_tokenizer(out, size, model_max_length=TEXT_CONFIGS[size]["max_position_embeddings"])
    tensors = talker_state_dict(size, seed, flavour, DTYPES[size])
    codec = codec_state_dict(config["audio_tokenizer_config"], seed)
    codec.update(encoder_state_dict(size, seed))  # the bundled audio tokenizer's encoder side
    # The codec stays float32: it is small and its goldens are float32.
    tensors.update({CODEC_PREFIX + k: v.float().contiguous() for k, v in codec.items()})
    _save_shards(tensors, out)
    return out


def checkpoint_digest(path: str | Path) -> str:
    """sha256 over every file of a checkpoint folder (names and bytes), for provenance."""
    h = hashlib.sha256()
    for f in sorted(Path(path).iterdir()):
        if f.is_file() and not f.name.startswith("."):  # not the cache's .complete marker
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--size", default="tiny", choices=sorted(TEXT_CONFIGS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flavour", default="greedy", choices=sorted(FLAVOURS))
    args = parser.parse_args()
    path = write_checkpoint(args.out_dir, args.size, args.seed, args.flavour)
    print(f"{args.size} {args.flavour} checkpoint (seed {args.seed}) in {path}: sha256 {checkpoint_digest(path)}")


if __name__ == "__main__":
    main()
