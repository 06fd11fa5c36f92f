"""The prefix-cache salt of a talker request: requests with the same voice share the voice's
prompt blocks; no block holding a generated row is ever shared between two requests.

vLLM hashes a KV block from its token ids, chained from the first block, with `cache_salt` mixed
into the first block only. The talker's token ids do not say what a position holds: the voice's
reference slots all carry the `<|tts|>` id and every generated row the `<|audio|>` id, while
the real input there is the sum of 8 code embeddings from the side channel
(reference/talker/code_channel.py). The salt supplies what the ids miss:

1. `voice_key`: a content hash of where the reference rows sit (`ref_start`) and what they are.
   Two requests with one salt embed the same rows at the same slots, so their prompt blocks
   hold equal inputs wherever their token ids are equal: a named voice's blocks are shared.
2. The prompt layout puts `<|audio|>` only at the prompt's end (reference/talker/prompts.py
   refuses it inside a text), so a block holding one request's generated rows can match another
   request's ids only if both prompts are equal.
3. `PromptSalts` never hands out one salt twice for the same prompt: each prompt has a repeat
   count, strictly increasing, that enters the salt. A request that is preempted and
   re-prefilled therefore finds no generated block but its own; a repeated prompt shares with
   other requests of the same repeat count only.

The salts of two `PromptSalts` (say two SpeechAPIs on one engine) never meet: each holds a
random instance key, so the repeat counts of one cannot meet those of the other.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Sequence

import numpy as np

from reference.talker.prompts import TalkerPrompt

ZERO_SHOT = "zero-shot"
COUNTER_SLOTS = 1 << 16  # repeat counters; prompts that share one only share less


def voice_key(ref_start: int | None, ref_rows: Sequence[Sequence[int]]) -> str:
    """A content hash of a prompt's reference rows and where they sit ("zero-shot" without)."""
    rows = np.asarray(ref_rows, dtype=np.int64)  # [N, 8]
    if rows.size == 0:
        return ZERO_SHOT
    if rows.ndim != 2 or rows.shape[0] == 0 or ref_start is None:
        raise ValueError(f"voice_key: reference rows must be [N, 8] with a start slot, got shape {rows.shape}, start {ref_start}")
    digest = hashlib.sha256()
    digest.update(f"higgs-v3-voice:{ref_start}:{rows.shape[0]}x{rows.shape[1]}:".encode())
    digest.update(rows.astype("<i8").tobytes())
    return digest.hexdigest()[:32]


def _prompt_slot(voice: str, token_ids: Sequence[int]) -> int:
    digest = hashlib.sha256(voice.encode() + np.asarray(token_ids, dtype="<i8").tobytes()).digest()
    return int.from_bytes(digest[:8], "little") % COUNTER_SLOTS


class PromptSalts:
    """Hands out the cache salt of each talker prompt (one instance per SpeechAPI)."""

    def __init__(self):
        self.instance = uuid.uuid4().hex[:12]
        self._repeats = np.zeros(COUNTER_SLOTS, dtype=np.int64)  # per prompt hash: prompts salted so far
        self._lock = threading.Lock()

    def salt(self, prompt: TalkerPrompt) -> str:
        voice = voice_key(prompt.ref_start, prompt.ref_rows)
        slot = _prompt_slot(voice, prompt.token_ids)
        with self._lock:
            repeat = int(self._repeats[slot])
            self._repeats[slot] += 1
        return f"{voice}.{self.instance}.{repeat}"
