"""Talker prompts in upstream's layout.

Zero-shot:   `<|tts|> <|text|> text <|audio|>`
Voice clone: `<|tts|> [<|ref_text|> ref text] <|ref_audio|> slot x N <|text|> text <|audio|>`

N is the number of delay-pattern rows of the reference codes ([8, T] codes give T + 7 rows). The
talker embeds slot i as the fused codebook embedding of row i. The slots' token ids carry nothing
(they hold the `<|tts|>` id, as upstream's do): where the slots are is known from the prompt's
structure and travels with the request (`ref_start`), never looked up by token id.

`<|audio|>` stands only at the prompt's end: a text that tokenizes to it is refused. Every
generated row carries that id too, and the prefix cache's safety rests on no prompt holding it
earlier (reference/talker/prompt_salt.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference.codec.delay_pattern import apply_delay
from reference.talker.special_tokens import SpecialIds


@dataclass(frozen=True)
class TalkerPrompt:
    token_ids: tuple[int, ...]
    # Delay-pattern rows of the reference codes, one per slot, in prompt order. [N, 8]
    ref_rows: tuple[tuple[int, ...], ...] = ()
    ref_start: int | None = None  # the position of the first slot (None: zero-shot)

    def codes_by_position(self) -> dict[int, tuple[int, ...]]:
        """Prompt position -> the codebook row embedded there (the slots only)."""
        if not self.ref_rows:
            return {}
        return {self.ref_start + i: row for i, row in enumerate(self.ref_rows)}


def _text_ids(tokenizer, ids: SpecialIds, text: str, what: str) -> list[int]:
    if not text or not text.strip():
        raise ValueError(f"{what} is empty: the talker needs text to speak")
    tokens = tokenizer.encode(text, add_special_tokens=False)
    if ids.audio in tokens:
        raise ValueError(
            f"{what} holds the special token <|audio|> (id {ids.audio}), which the talker's prompt "
            f"reserves for the start of speech: remove it from the {what}"
        )
    return tokens


def zero_shot(tokenizer, ids: SpecialIds, text: str) -> TalkerPrompt:
    return TalkerPrompt((ids.tts, ids.text, *_text_ids(tokenizer, ids, text, "text"), ids.audio))


def voice_clone(tokenizer, ids: SpecialIds, text: str, ref_codes, ref_text: str | None = None) -> TalkerPrompt:
    """`ref_codes` are the reference audio's codec codes [8, T] (no delay pattern yet)."""
    if ids.ref_audio is None:
        raise ValueError("tokenizer lacks <|ref_audio|>: voice clone needs a Higgs v3 tokenizer")
    rows = tuple(tuple(int(c) for c in row) for row in apply_delay(ref_codes).tolist())
    head = [ids.tts]
    if ref_text is not None:
        if ids.ref_text is None:
            raise ValueError("tokenizer lacks <|ref_text|>: drop ref_text or use a Higgs v3 tokenizer")
        head += [ids.ref_text, *_text_ids(tokenizer, ids, ref_text, "ref_text")]
    head.append(ids.ref_audio)
    start = len(head)
    head += [ids.tts] * len(rows)
    tail = [ids.text, *_text_ids(tokenizer, ids, text, "text"), ids.audio]
    return TalkerPrompt(tuple(head + tail), rows, start)


def reference_slots(prompt_len: int, ref_start: int | None, num_rows: int) -> range:
    """The positions the reference rows go to, checked against the prompt they arrived with."""
    if not num_rows:
        return range(0)
    if ref_start is None or ref_start < 1 or ref_start + num_rows > prompt_len:
        raise ValueError(
            f"reference rows at {ref_start}..{(ref_start or 0) + num_rows - 1} do not fit a prompt of "
            f"{prompt_len} tokens: build voice-clone requests with reference.talker.prompts.voice_clone"
        )
    return range(ref_start, ref_start + num_rows)
