"""One talker sampling step for a batch, as tensor code shared by the V1 and V2 samplers.

The generation contract (delay pattern with N = 8 codebooks, BOC = 1024, EOC = 1025):
- lead-in: at audio step s, codebooks q > s are BOC;
- active codebooks never emit BOC; EOC only on codebook 0; when EOC appears at codebook k,
  codebooks <= k become EOC and the ramp-down starts;
- ramp-down: each step one more leading codebook is locked to EOC, the others emit plain codes;
- once a row is all EOC the request is done: the LM token becomes EOS (else `<|audio|>`).
The whole state is read off the previous row (its count of leading EOCs) and the step index, so
a re-prefilled request (preemption) continues exactly where it stopped.

Sampling per codebook: temperature -> top-k -> top-p -> a Gumbel-max draw whose noise is a hash
of (seed, step, codebook, code): a seeded request draws the same codes whatever batch it is in.
Temperature <= 0 is greedy. No host synchronisation: safe on a CUDA decode path.
"""

from __future__ import annotations

import torch

from reference.codebooks import BOC, CODEBOOK_VOCAB, EOC, NUM_CODEBOOKS

_MASK32 = 0xFFFFFFFF


def leading_eoc(rows: torch.Tensor) -> torch.Tensor:
    """Count of leading EOC codebooks per row. [B, 8] -> [B]"""
    return torch.cumprod((rows == EOC).long(), dim=1).sum(dim=1)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xorshift-multiply) on int64 tensors holding uint32 values."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def gumbel_noise(seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise per (request, codebook, code) from (seed, step). [B], [B] -> [B, 8, 1026]"""
    device = seed.device
    q = torch.arange(NUM_CODEBOOKS, device=device, dtype=torch.int64)
    v = torch.arange(CODEBOOK_VOCAB, device=device, dtype=torch.int64)
    key = _mix32((seed.long() & _MASK32) ^ _mix32(step.long() & _MASK32))  # [B]
    key = _mix32(key[:, None] ^ (q[None, :] * 0x9E3779B1 & _MASK32))  # [B, 8]
    bits = _mix32(key[:, :, None] ^ _mix32(v)[None, None, :])  # [B, 8, 1026]
    uniform = (bits.double() + 0.5) / 2.0**32
    return -torch.log(-torch.log(uniform)).float()


def allowed_codes(prev_row: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Which ids each codebook may sample this step (forced BOC/EOC handled separately). [B, 8, 1026]"""
    ramping = leading_eoc(prev_row) > 0  # [B]
    allowed = torch.ones(prev_row.shape[0], NUM_CODEBOOKS, CODEBOOK_VOCAB, dtype=torch.bool, device=prev_row.device)
    allowed[:, :, BOC] = False
    allowed[:, 1:, EOC] = False
    allowed[:, 0, EOC] = ~ramping
    return allowed


def filter_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Masks logits outside each request's top-k, then outside its top-p nucleus. [B, 8, V]"""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    rank = torch.arange(logits.shape[-1], device=logits.device)
    k = torch.where((top_k <= 0) | (top_k >= logits.shape[-1]), logits.shape[-1], top_k)  # [B]
    keep = (rank[None, None, :] < k[:, None, None]).expand_as(logits)
    probs = torch.softmax(sorted_logits.masked_fill(~keep, float("-inf")), dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    keep = keep & (mass_before < top_p[:, None, None])  # the top-1 always stays (mass before it is 0)
    mask = torch.zeros_like(keep).scatter(-1, order, keep)
    return logits.masked_fill(~mask, float("-inf"))


def talker_step(
    audio_logits: torch.Tensor,  # [B, 8, 1026]
    prev_row: torch.Tensor,  # [B, 8] the previous step's codes; any non-EOC row at step 0
    step: torch.Tensor,  # [B] audio rows produced before this one
    temperature: torch.Tensor,  # [B]
    top_k: torch.Tensor,  # [B] <= 0: off
    top_p: torch.Tensor,  # [B] 1.0: off
    seed: torch.Tensor,  # [B]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns this step's codes [B, 8] and whether the request is done (LM token EOS) [B]."""
    logits = audio_logits.float()
    prev_eoc = leading_eoc(prev_row)  # [B]
    done = prev_eoc >= NUM_CODEBOOKS
    ramping = prev_eoc > 0
    masked = logits.masked_fill(~allowed_codes(prev_row, step), float("-inf"))
    greedy = temperature <= 0
    scaled = masked / torch.where(greedy, 1.0, temperature)[:, None, None]
    filtered = filter_top_k_top_p(scaled, top_k, top_p)
    noisy = filtered + gumbel_noise(seed, step) * (~greedy)[:, None, None]
    sampled = torch.argmax(noisy, dim=-1)  # [B, 8]
    # A row whose every id is masked falls back to the plain argmax.
    all_masked = torch.isneginf(filtered).all(dim=-1)
    sampled = torch.where(all_masked, torch.argmax(logits, dim=-1), sampled)

    q = torch.arange(NUM_CODEBOOKS, device=logits.device)[None, :]
    codes = torch.where(~ramping[:, None] & (q > step[:, None]), BOC, sampled)
    # EOC at codebook k turns codebooks <= k into EOC.
    eoc_at_or_after = torch.flip(torch.cummax(torch.flip((codes == EOC).long(), [1]), dim=1).values, [1]) > 0
    codes = torch.where(eoc_at_or_after & ~ramping[:, None], EOC, codes)
    # Ramp-down: one more leading codebook locked to EOC per step.
    codes = torch.where(ramping[:, None] & (q < (prev_eoc + 1)[:, None]), EOC, codes)
    codes = torch.where(done[:, None], EOC, codes)
    return codes, done
