"""The independent sampling oracle: which codes one talker draw may pick, and with what probability.

Written from the sampling contract in numpy float64, one codebook at a time, sharing no code with
reference/talker/step.py, so that a rewrite of the sampler for speed is measured against the
contract rather than against itself:

1. the contract's masks: BOC is never drawn; EOC only on codebook 0 and only before the ramp-down;
   masked codes take no place in top-k and no mass in top-p;
2. temperature: logits / T; T <= 0 is greedy (the highest allowed logit, whatever top-k / top-p say);
3. top-k: the k highest allowed codes (k <= 0 or k >= the vocabulary: off);
4. top-p: of those, renormalised, the smallest prefix in descending probability whose mass reaches
   p: a code is kept when the mass of the codes before it is below p (so the code that crosses p
   is kept, and when p is reached exactly the next one is not); top_p 1.0 keeps all k;
5. the draw: proportional to the renormalised probabilities of the kept codes.

Where equal logits straddle the top-k or top-p edge the contract does not say which of them are
kept, only how many; this oracle keeps the lowest code ids (its ties are broken by code id).
"""

from __future__ import annotations

import numpy as np

# Own copies of the format's constants, on purpose (see talker_torch.py).
N = 8
VOCAB = 1026
BOC, EOC = 1024, 1025


def allowed_ids(codebook: int, ramping: bool) -> np.ndarray:
    """The codes a free draw of `codebook` may pick: the 1024 audio codes, plus EOC on codebook 0
    before the ramp-down."""
    allowed = np.zeros(VOCAB, dtype=bool)
    allowed[:1024] = True
    allowed[EOC] = codebook == 0 and not ramping
    return allowed


def _ranked(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Allowed code ids in descending logit, equal logits in ascending code id."""
    ids = np.flatnonzero(allowed)
    return ids[np.argsort(-logits[ids].astype(np.float64), kind="stable")]


def _top_k_count(k: int, allowed_count: int) -> int:
    return allowed_count if k <= 0 or k >= allowed_count else k


def filtered_distribution(logits, allowed, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The probability of every code [VOCAB] for one draw: zero outside the kept codes."""
    logits, allowed = np.asarray(logits, dtype=np.float64), np.asarray(allowed, dtype=bool)
    ranked = _ranked(logits, allowed)
    probs = np.zeros(VOCAB)
    if temperature <= 0:
        probs[ranked[0]] = 1.0
        return probs
    kept = ranked[: _top_k_count(top_k, len(ranked))]
    z = logits[kept] / temperature
    weights = np.exp(z - z.max())
    p = weights / weights.sum()
    mass_before = np.concatenate([[0.0], np.cumsum(p)[:-1]])
    nucleus = mass_before < top_p
    probs[kept[nucleus]] = p[nucleus] / p[nucleus].sum()
    return probs


def admissible(logits, allowed, temperature: float, top_k: int, top_p: float, code: int,
               logit_slack: float) -> bool:
    """Whether `code` may have been drawn by a sampler whose logits differ from these by at most
    `logit_slack` each (float rounding of the engine against the oracle).

    Inside the exact support: always. Outside: only as a near call at the edge, i.e. fewer than k
    codes have a logit more than 2 * slack above its own (top-k could have kept it), and the mass
    of those codes, in the renormalised top-k distribution, is below top_p + 2 * slack / T (the
    first-order change of a cumulative mass when every logit / T moves by at most slack / T).
    """
    logits, allowed = np.asarray(logits, dtype=np.float64), np.asarray(allowed, dtype=bool)
    if not allowed[code]:
        return False
    if filtered_distribution(logits, allowed, temperature, top_k, top_p)[code] > 0:
        return True
    if temperature <= 0:
        return bool(logits[code] >= logits[allowed].max() - 2 * logit_slack)
    ranked = _ranked(logits, allowed)
    surely_before = ranked[logits[ranked] > logits[code] + 2 * logit_slack]
    k = _top_k_count(top_k, len(ranked))
    if len(surely_before) >= k:
        return False
    kept = ranked[:k]
    weights = np.exp((logits[kept] - logits[kept].max()) / temperature)
    p = dict(zip(kept.tolist(), weights / weights.sum()))
    mass = sum(p.get(int(j), 0.0) for j in surely_before)
    return bool(mass < top_p + 2 * logit_slack / temperature + 1e-6)


def randomized_pit(probs: np.ndarray, code: int, v: float) -> float:
    """The randomised probability-integral transform of one draw: F(code-) + v * P(code), with
    codes ordered by descending probability (ties by code id) and v ~ U(0, 1). Uniform on (0, 1)
    when the draw follows `probs`, whatever `probs` is (discrete included)."""
    order = np.lexsort((np.arange(VOCAB), -probs))
    position = int(np.flatnonzero(order == code)[0])
    below = float(probs[order[:position]].sum())
    return below + v * float(probs[code])
