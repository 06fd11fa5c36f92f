"""The free draws of a realised talker stream, each set against the oracle's distribution.

A stream's rows say by themselves which codes were drawn and which were forced (the generation
contract): before the ramp-down, codebooks q <= t of row t are drawn (the others are the BOC
lead-in); in the ramp-down, the row after a row with e leading EOCs has its first e + 1 codebooks
locked to EOC and the rest drawn. A drawn code is judged against the oracle's filtered
distribution of that step's teacher-forced logits (conformance/oracles/sampling_numpy.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from conformance.oracles.sampling_numpy import EOC, N, admissible, allowed_ids, filtered_distribution, randomized_pit


def leading_eocs(row) -> int:
    count = 0
    for code in row:
        if code != EOC:
            break
        count += 1
    return count


def free_draws(rows: list[list[int]]):
    """(step, codebook, ramping) of every drawn code of a stream."""
    for t in range(len(rows)):
        locked = leading_eocs(rows[t - 1]) if t > 0 else 0
        if locked:
            yield from ((t, q, True) for q in range(locked + 1, N))
        else:
            yield from ((t, q, False) for q in range(min(t, N - 1) + 1))


@dataclass
class DrawReport:
    """What the draws of one sampling setting show."""

    pit: list[float] = field(default_factory=list)  # randomised PIT of the draws with >= 2 candidates
    draws: int = 0
    edge: int = 0  # outside the oracle's exact support, forgiven as a near call (float rounding)
    outside: list[str] = field(default_factory=list)  # outside the support beyond any near call

    def add_stream(self, logits: np.ndarray, rows: list[list[int]], sampling: dict, logit_slack: float,
                   rng: np.random.Generator, label: str) -> None:
        """logits: the oracle's teacher-forced logits of the stream [len(rows), 8, 1026]."""
        t_, k, p = float(sampling["temperature"]), int(sampling["top_k"]), float(sampling["top_p"])
        for step, q, ramping in free_draws(rows):
            allowed = allowed_ids(q, ramping)
            probs = filtered_distribution(logits[step, q], allowed, t_, k, p)
            code = rows[step][q]
            self.draws += 1
            v = rng.uniform()  # drawn for every draw, so one draw's verdict never shifts the others'
            if probs[code] > 0:
                if np.count_nonzero(probs) > 1:
                    self.pit.append(randomized_pit(probs, code, v))
            elif admissible(logits[step, q], allowed, t_, k, p, code, logit_slack):
                self.edge += 1
            else:
                support = np.flatnonzero(probs)
                self.outside.append(f"{label} step {step} codebook {q}: drew {code}, outside the support "
                                    f"{support[np.argsort(-probs[support])].tolist()[:12]}")
