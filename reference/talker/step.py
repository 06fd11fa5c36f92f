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

Speed: on a GPU the step is over a hundred tiny kernels, so their count is its cost (host launches
and device time alike). What depends on nothing but the device (the codebook masks, the hash of
every code id) is built once per device (`_constants`), and the leading-EOC count once per step.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from reference.codebooks import BOC, CODEBOOK_VOCAB, EOC, NUM_CODEBOOKS

_MASK32 = 0xFFFFFFFF


@dataclass(frozen=True)
class _Constants:
    codebooks: torch.Tensor  # [8] 0..7
    codebook_keys: torch.Tensor  # [8] each codebook's salt of the noise key
    code_hashes: torch.Tensor  # [1026] _mix32 of each code id
    allowed: torch.Tensor  # [8, 1026] bool: what a codebook may sample whatever the state
    eoc_0: torch.Tensor  # [8, 1026] bool: EOC on codebook 0 alone, forbidden while ramping down


@functools.cache
def _constants(device: torch.device) -> _Constants:
    q = torch.arange(NUM_CODEBOOKS, dtype=torch.int64)
    allowed = torch.ones(NUM_CODEBOOKS, CODEBOOK_VOCAB, dtype=torch.bool)
    allowed[:, BOC] = False  # active codebooks never emit BOC
    allowed[1:, EOC] = False  # EOC only on codebook 0
    eoc_0 = torch.zeros_like(allowed)
    eoc_0[0, EOC] = True
    return _Constants(
        codebooks=q.to(device),
        codebook_keys=(q * 0x9E3779B1 & _MASK32).to(device),
        code_hashes=_mix32(torch.arange(CODEBOOK_VOCAB, dtype=torch.int64)).to(device),
        allowed=allowed.to(device),
        eoc_0=eoc_0.to(device),
    )


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
    const = _constants(seed.device)
    key = _mix32((seed.long() & _MASK32) ^ _mix32(step.long() & _MASK32))  # [B]
    key = _mix32(key[:, None] ^ const.codebook_keys[None, :])  # [B, 8]
    bits = _mix32(key[:, :, None] ^ const.code_hashes[None, None, :])  # [B, 8, 1026]
    uniform = (bits.double() + 0.5) / 2.0**32
    return -torch.log(-torch.log(uniform)).float()


def allowed_codes(ramping: torch.Tensor) -> torch.Tensor:
    """Which ids each codebook may sample this step (forced BOC/EOC handled separately): BOC
    never, EOC on codebook 0 only and not while ramping down. [B] bool -> [B, 8, 1026]"""
    const = _constants(ramping.device)
    return const.allowed & ~(ramping[:, None, None] & const.eoc_0)


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
    masked = logits.masked_fill(~allowed_codes(ramping), float("-inf"))
    greedy = temperature <= 0
    scaled = masked / torch.where(greedy, 1.0, temperature)[:, None, None]
    filtered = filter_top_k_top_p(scaled, top_k, top_p)
    noisy = filtered + gumbel_noise(seed, step) * (~greedy)[:, None, None]
    sampled = torch.argmax(noisy, dim=-1)  # [B, 8]
    # A row whose every id is masked falls back to the plain argmax.
    all_masked = torch.isneginf(filtered).all(dim=-1)
    sampled = torch.where(all_masked, torch.argmax(logits, dim=-1), sampled)

    q = _constants(logits.device).codebooks[None, :]
    codes = torch.where(~ramping[:, None] & (q > step[:, None]), BOC, sampled)
    # EOC at codebook k turns codebooks <= k into EOC.
    eoc_at_or_after = torch.flip(torch.cummax(torch.flip((codes == EOC).long(), [1]), dim=1).values, [1]) > 0
    codes = torch.where(eoc_at_or_after & ~ramping[:, None], EOC, codes)
    # Ramp-down: one more leading codebook locked to EOC per step.
    codes = torch.where(ramping[:, None] & (q < (prev_eoc + 1)[:, None]), EOC, codes)
    codes = torch.where(done[:, None], EOC, codes)
    return codes, done
