"""Means over the prompt set with 95 % confidence intervals, and the V2 - V1 parity bound.

Interval: Student t over utterances (mean +- t(0.975, n-1) * sd / sqrt(n)); utterances are the
sampling unit, as in seed-tts-eval. Parity: with n prompts the standard error of a mean is about
sd / sqrt(n), so a V2 - V1 difference smaller than two standard errors of one utterance's spread
cannot be told from sampling noise; the bound is 2 * per_utterance_sd / sqrt(n) (floors.yaml),
one-sided: V2 may be better by any amount.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Estimate:
    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}] (n={self.n})"


def mean_ci(scores: list[float], level: float = 0.95) -> Estimate:
    values = np.asarray(scores, dtype=np.float64)
    n = len(values)
    if n == 0:
        raise ValueError("no scores")
    mean = float(values.mean())
    if n == 1:
        return Estimate(mean, -math.inf, math.inf, 1)
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * values.std(ddof=1) / math.sqrt(n))
    return Estimate(mean, mean - half, mean + half, n)


def parity_bound(per_utterance_sd: float, n: int) -> float:
    return 2.0 * per_utterance_sd / math.sqrt(n)


def v2_no_worse(v1: list[float], v2: list[float], lower_is_better: bool, bound: float) -> tuple[bool, Estimate]:
    """Whether mean(V2 - V1) over the same prompts stays within `bound` on the bad side, and the
    interval of the paired difference."""
    diff = mean_ci([b - a for a, b in zip(v1, v2, strict=True)])
    worse_by = diff.mean if lower_is_better else -diff.mean
    return worse_by <= bound, diff
