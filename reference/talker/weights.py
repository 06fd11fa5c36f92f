"""Which checkpoint tensor loads into which talker parameter, as the config's tie flags say.

- Text head: `tied.head.text_head.weight`, unless `text_config.tie_word_embeddings` ties it to
  the text embedding; then that tensor is not needed (and ignored where a checkpoint has it).
- Audio head: the fused codebook table itself when `audio_encoder_config.tie_word_embeddings`
  (true when absent), else its own tensor `tied.head.modality_heads.0.weight`; a tied checkpoint
  may still store that tensor, which is then ignored. Nothing the config calls separate is tied.
- The bundled codec's tensors are not the talker's.
A checkpoint that lacks a tensor the talker needs fails at load, naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference.codebooks import AUDIO_EMBEDDING, AUDIO_HEAD_PREFIX, CODEC_PREFIX

TEXT_EMBEDDING = "tied.embedding.text_embedding.weight"
TEXT_HEAD = "tied.head.text_head.weight"
AUDIO_HEAD = AUDIO_HEAD_PREFIX + "weight"
# Every decoder layer's tensors (Qwen3, no biases), under body.layers.<i>.
LAYER_TENSORS = (
    "input_layernorm.weight", "post_attention_layernorm.weight",
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
)


@dataclass(frozen=True)
class TieFlags:
    text_head: bool  # the text head is the text embedding
    audio_head: bool  # the audio head is the fused codebook table

    @classmethod
    def from_config(cls, config) -> TieFlags:
        """From a Higgs v3 config: the transformers object or config.json as a dict."""
        if isinstance(config, dict):
            text, audio = config.get("text_config", {}), config.get("audio_encoder_config", {})
            text_tied = bool(text.get("tie_word_embeddings", False))
        else:
            text, audio = config.get_text_config(), config.audio_encoder_config
            text_tied = bool(getattr(text, "tie_word_embeddings", False))
        return cls(text_head=text_tied, audio_head=bool((audio or {}).get("tie_word_embeddings", True)))


def weight_target(name: str, ties: TieFlags) -> str | None:
    """The talker parameter a checkpoint tensor loads into; None for tensors the talker does not
    load (the bundled codec, and a head the config ties). Unknown names raise."""
    if name.startswith(CODEC_PREFIX):
        return None
    if name == TEXT_HEAD:
        return None if ties.text_head else "text_head.weight"
    if name.startswith(AUDIO_HEAD_PREFIX):
        if name != AUDIO_HEAD:
            raise ValueError(f"unexpected audio-head tensor {name!r}: the talker's audio head is {AUDIO_HEAD}")
        return None if ties.audio_head else "audio_head.weight"
    if name == TEXT_EMBEDDING:
        return "body.embed_tokens.weight"
    if name == AUDIO_EMBEDDING:
        return "audio_embedding.weight"
    if name.startswith("body."):
        return name
    raise ValueError(f"unexpected weight {name!r} in a Higgs v3 checkpoint")


def required_names(ties: TieFlags, num_layers: int) -> set[str]:
    """The checkpoint tensors the talker needs under these tie flags."""
    names = {TEXT_EMBEDDING, AUDIO_EMBEDDING, "body.norm.weight"}
    names |= {f"body.layers.{i}.{t}" for i in range(num_layers) for t in LAYER_TENSORS}
    if not ties.text_head:
        names.add(TEXT_HEAD)
    if not ties.audio_head:
        names.add(AUDIO_HEAD)
    return names


def missing_names(seen: set[str], ties: TieFlags, num_layers: int) -> list[str]:
    return sorted(required_names(ties, num_layers) - seen)


def check_complete(seen: set[str], ties: TieFlags, num_layers: int) -> None:
    missing = missing_names(seen, ties, num_layers)
    if missing:
        head = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise ValueError(
            f"the checkpoint lacks {len(missing)} tensor(s) the talker needs: {head} (tie flags: text head "
            f"{'tied' if ties.text_head else 'separate'}, audio head {'tied' if ties.audio_head else 'separate'}, "
            "from config.json's text_config / audio_encoder_config tie_word_embeddings)"
        )
