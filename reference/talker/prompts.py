"""Talker prompts: zero-shot `<|tts|> <|text|> text <|audio|>` and voice clone.

Voice clone: `<|tts|> [<|ref_text|> ref text] <|ref_audio|> <|audio_placeholder|> x N <|text|> text
<|audio|>`, where N is the number of delay-pattern rows of the reference codes; the talker embeds
each placeholder as the fused codebook embedding of its row.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference.talker.special_tokens import SpecialIds


@dataclass(frozen=True)
class TalkerPrompt:
    token_ids: tuple[int, ...]
    # Delay-pattern rows of the reference codes, one per placeholder, in prompt order. [N, 8]
    ref_rows: tuple[tuple[int, ...], ...] = ()

    def codes_by_position(self, placeholder_id: int | None) -> dict[int, tuple[int, ...]]:
        """Prompt position -> the codebook row embedded there (placeholders only)."""
        if not self.ref_rows:
            return {}
        return dict(zip(placeholder_positions(self.token_ids, placeholder_id, len(self.ref_rows)), self.ref_rows))


def placeholder_positions(token_ids, placeholder_id: int | None, num_rows: int) -> list[int]:
    """Positions of the audio placeholders of a prompt, one per reference row (checked)."""
    positions = [i for i, t in enumerate(token_ids) if t == placeholder_id]
    if len(positions) != num_rows:
        raise ValueError(f"prompt has {len(positions)} audio placeholders but {num_rows} reference rows")
    return positions


def _text_ids(tokenizer, text: str, what: str) -> list[int]:
    if not text or not text.strip():
        raise ValueError(f"{what} is empty: the talker needs text to speak")
    return tokenizer.encode(text, add_special_tokens=False)


def zero_shot(tokenizer, ids: SpecialIds, text: str) -> TalkerPrompt:
    return TalkerPrompt((ids.tts, ids.text, *_text_ids(tokenizer, text, "text"), ids.audio))


def voice_clone(tokenizer, ids: SpecialIds, text: str, ref_codes, ref_text: str | None = None) -> TalkerPrompt:
    """`ref_codes` are the reference audio's codec codes [8, T] (no delay pattern yet)."""
    from reference.codec.delay_pattern import apply_delay

    if ids.ref_audio is None or ids.audio_placeholder is None:
        raise ValueError("tokenizer lacks <|ref_audio|> or <|audio_placeholder|>: voice clone needs both")
    rows = [tuple(int(c) for c in row) for row in apply_delay(ref_codes).tolist()]
    head = [ids.tts]
    if ref_text:
        if ids.ref_text is None:
            raise ValueError("tokenizer lacks <|ref_text|>: drop ref_text or use a Higgs v3 tokenizer")
        head += [ids.ref_text, *_text_ids(tokenizer, ref_text, "ref_text")]
    head += [ids.ref_audio, *([ids.audio_placeholder] * len(rows))]
    tail = [ids.text, *_text_ids(tokenizer, text, "text"), ids.audio]
    return TalkerPrompt(tuple(head + tail), tuple(rows))
