"""The talker's per-slot state on the device (Model Runner V2) and its sampling step over slots.

Every buffer has one row per engine slot, and is read and written with tensor indexing only (no
host synchronisation), so it is correct under async scheduling and inside CUDA graphs:
- `codes` [slots, max_model_len + 2, 8]: the codebook row embedded at each position of a request
  (-1 for text), i.e. the voice-clone reference rows at their slots and every generated row at
  the position of its `<|audio|>` token. Column max_model_len is the position after the last
  token; the last column (`discard`) takes the writes of rows that sample nothing;
- per-slot sampling parameters (temperature, top-k, top-p, seed).

`reset_codes` and `set_sampling` write a new request's slot without waiting for the GPU either: a
Python number assigned into a CUDA tensor (`t[i] = x`) is copied from the host and synchronises the
stream, so an engine step that admits a request would first wait for the step in flight (about
3 ms a request in py-spy of a served run on an H100).

`sample` is the whole of a decode step's device work after the logits: it reads each row's
previous codes and parameters by slot, runs the talker step (reference/talker/step.py), writes
the new codes to the position of the token it samples and returns the LM tokens and the code
channel's ids. Under the switch sampler_cudagraphs it is replayed from CUDA graphs
(reference/talker/step_graphs.py): about 35 launches a step fewer than with the step alone in graphs.
"""

from __future__ import annotations

import torch

from reference.codebooks import NUM_CODEBOOKS
from reference.talker import code_channel
from reference.talker.step import talker_step


class TalkerSlots:
    def __init__(self, slots: int, max_model_len: int, lm_ids: torch.Tensor, device) -> None:
        """lm_ids: the LM tokens `<|audio|>` and EOS, [2] on `device`."""
        self.discard = max_model_len + 1
        self.codes = torch.full((slots, max_model_len + 2, NUM_CODEBOOKS), -1, dtype=torch.int16, device=device)
        self.temperature = torch.zeros(slots, dtype=torch.float32, device=device)
        self.top_k = torch.zeros(slots, dtype=torch.int64, device=device)
        self.top_p = torch.ones(slots, dtype=torch.float32, device=device)
        self.seed = torch.zeros(slots, dtype=torch.int64, device=device)
        self.lm_ids = lm_ids

    def reset_codes(self, slot: int, reference: tuple[int, list[list[int]]] | None = None) -> None:
        """A new request's rows: none but its voice-clone reference rows (their first position, the
        rows). Nothing here waits for the device."""
        self.codes[slot].fill_(-1)
        if reference is not None:
            start, rows = reference
            staged = torch.tensor(rows, dtype=torch.int16)
            if self.codes.is_cuda:
                staged = staged.pin_memory()
            self.codes[slot, start : start + len(rows)].copy_(staged, non_blocking=True)

    def set_sampling(self, slot: int, temperature: float, top_k: int, top_p: float, seed: int) -> None:
        """A request's sampling parameters (top_k 0: none), without waiting for the device."""
        self.temperature[slot].fill_(temperature)
        self.top_k[slot].fill_(top_k)
        self.top_p[slot].fill_(top_p)
        self.seed[slot].fill_(seed)

    def sample(
        self,
        audio_logits: torch.Tensor,  # [B, 8, 1026]
        slot: torch.Tensor,  # [B] each row's slot
        pos: torch.Tensor,  # [B] the position of each row's last input token
        prompt_len: torch.Tensor,  # [B]
        num_sampled: torch.Tensor,  # [B] 0 for a row that samples nothing (a partial prefill chunk)
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The LM tokens [B] and the code channel's ids [B, 9] of this step; the new codes are
        written at pos + 1 of each row that samples. Rows are independent: a row of slot 0 at
        position 0 that samples nothing (a graph's padding row) changes no real row."""
        slot, pos = slot.long(), pos.long()
        codes, done = talker_step(
            audio_logits.float(),
            self.codes[slot, pos].long(),  # the input token's row: the previous step's codes
            pos + 1 - prompt_len.long(),
            self.temperature[slot],
            self.top_k[slot],
            self.top_p[slot],
            self.seed[slot],
        )
        # A partial prefill chunk's next position is prompt: only rows that really sample write there.
        written = torch.where(num_sampled > 0, pos + 1, self.discard)
        self.codes[slot, written] = codes.to(torch.int16)
        lm_tokens = torch.where(done, self.lm_ids[1], self.lm_ids[0])
        return lm_tokens, code_channel.token_ids(lm_tokens, codes)
