"""The tokenizer's Higgs v3 special tokens, looked up by name (never by a hard-coded id)."""

from __future__ import annotations

from dataclasses import dataclass

TTS = "<|tts|>"
TEXT = "<|text|>"
AUDIO = "<|audio|>"
REF_AUDIO = "<|ref_audio|>"
REF_TEXT = "<|ref_text|>"
END_OF_TEXT = "<|endoftext|>"
AUDIO_END = "<|audio_end|>"

REQUIRED = (TTS, TEXT, AUDIO)
VOICE_CLONE = (REF_AUDIO, REF_TEXT)  # optional: only voice clone needs them


@dataclass(frozen=True)
class SpecialIds:
    tts: int
    text: int
    audio: int
    eos: int
    audio_end: int | None
    ref_audio: int | None
    ref_text: int | None

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return tuple(i for i in (self.eos, self.audio_end) if i is not None)


def special_ids(tokenizer) -> SpecialIds:
    """Reads the ids from a transformers tokenizer; the three TTS tokens are required."""
    vocab = tokenizer.get_vocab()
    missing = [t for t in REQUIRED if t not in vocab]
    if missing:
        raise ValueError(
            f"tokenizer lacks the Higgs v3 special tokens {missing}: point the model path at a "
            "Higgs Audio v3 checkpoint (its tokenizer adds <|tts|>, <|text|>, <|audio|>)"
        )
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else vocab.get(END_OF_TEXT)
    if eos is None:
        raise ValueError(f"tokenizer has no eos token ({END_OF_TEXT}): set eos_token in tokenizer_config.json")
    return SpecialIds(
        tts=vocab[TTS],
        text=vocab[TEXT],
        audio=vocab[AUDIO],
        eos=eos,
        audio_end=vocab.get(AUDIO_END),
        ref_audio=vocab.get(REF_AUDIO),
        ref_text=vocab.get(REF_TEXT),
    )


def load_tokenizer(path):
    """The checkpoint's tokenizer, with the Higgs config registered first, so that transformers
    reads config.json as what it is (it warns about an unknown model type otherwise)."""
    from transformers import AutoTokenizer

    from reference.talker.config import register_with_transformers

    register_with_transformers()
    return AutoTokenizer.from_pretrained(str(path))
