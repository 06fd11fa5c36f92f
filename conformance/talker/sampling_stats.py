"""The two goodness-of-fit tests of the sampling checks, in torch and numpy only (the GPU machine's
environment is vLLM's, where scipy is not promised); tests/test_sampling_distribution.py checks
both p-values against scipy where scipy is installed.

- Pearson's chi-square of observed counts against expected probabilities: p-value from the
  chi-square distribution with (cells - 1) degrees of freedom (upper regularised gamma).
- One-sample Kolmogorov-Smirnov against U(0, 1): p-value from Kolmogorov's limit distribution with
  Stephens' small-sample correction (accurate to about 1% of the p-value for n >= 35).
"""

from __future__ import annotations

import math

import numpy as np
import torch


def chi_square_p(observed, expected_probs) -> tuple[float, float]:
    """(statistic, p-value) of Pearson's chi-square; cells with zero expected probability must be
    empty (the caller checks the support first)."""
    observed = np.asarray(observed, dtype=np.float64)
    probs = np.asarray(expected_probs, dtype=np.float64)
    if np.any(observed[probs == 0] > 0):
        raise ValueError("draws in a cell of probability zero: check the support before the frequencies")
    cells = probs > 0
    expected = observed.sum() * probs[cells] / probs[cells].sum()
    statistic = float(((observed[cells] - expected) ** 2 / expected).sum())
    dof = int(cells.sum()) - 1
    if dof < 1:
        return statistic, 1.0
    p = torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(statistic / 2, dtype=torch.float64))
    return statistic, float(p)


def ks_uniform_p(values) -> tuple[float, float]:
    """(D, p-value) of the one-sample KS test of `values` against U(0, 1)."""
    u = np.sort(np.asarray(values, dtype=np.float64))
    n = len(u)
    if n == 0:
        raise ValueError("no values")
    i = np.arange(1, n + 1)
    d = float(max((i / n - u).max(), (u - (i - 1) / n).max()))
    x = (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)) * d
    if x < 0.2:
        return d, 1.0
    p = 2 * sum((-1) ** (j - 1) * math.exp(-2 * j * j * x * x) for j in range(1, 101))
    return d, min(1.0, max(0.0, p))
