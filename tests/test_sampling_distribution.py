"""What one talker draw may pick, and how often: reference/talker/step.py on hand-made logits
(conformance/cases/talker/sampling_support.yaml) against the contract.

A draw is observed only through `talker_step`, the sampler's public step, so any rewrite of the
filter (fused, sorted differently, on another device) is held to the same cases. Per case and
codebook group (codebook 0, which may draw EOC; codebooks 1-7) the draws of `draws` seeds must
show exactly the stated support, and their frequencies must pass Pearson's chi-square against the
renormalised probabilities of the independent oracle (conformance/oracles/sampling_numpy.py).

The statistical test: chi-square over the classes of equal logit in the support (a class of tied
codes counts as one cell, since the contract leaves open which of them an edge keeps), each case
and group at alpha / (number of tests), so that with seeds drawn at random a correct sampler
would fail one of them with probability at most `alpha` = 1e-3 (Bonferroni). The seeds are
fixed, so the outcome is reproducible. A kept code has probability 0.03 or more in every case: with
1000 draws its absence from the draws has probability below 1e-13 under a correct sampler.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from conformance import case_files
from conformance.oracles.sampling_numpy import allowed_ids, filtered_distribution
from conformance.talker.sampling_stats import chi_square_p, ks_uniform_p
from reference.talker.step import talker_step

pytestmark = pytest.mark.cpu

DOC = case_files.load("talker/sampling_support")
CASES = {c["id"]: c for c in DOC["cases"]}
GROUPS = {"codebook_0": [0], "codebooks_1_to_7": list(range(1, 8))}
STEP, PREV_CODE = 20, 3  # past the lead-in, no EOC in the previous row: no codebook is forced
N_TESTS = sum(len(GROUPS) for _ in CASES)


def case_logits(case: dict) -> np.ndarray:
    """The logits of one codebook [1026]: the case's codes, every other at the floor."""
    logits = np.full(1026, DOC["floor"])
    for code, value in case["logits"]:
        logits[code] = value
    return logits


def expected_support(case: dict, group: str) -> tuple[set[int], dict | None]:
    if group == "codebook_0" and "support_codebook_0" in case:
        return set(case["support_codebook_0"]), None
    return set(case["support"]), case.get("tied_kept")


@functools.cache
def draws(case_id: str) -> np.ndarray:
    """`draws` codes per codebook under `talker_step`, one seed per draw. [draws, 8]"""
    case = CASES[case_id]
    n = DOC["draws"]
    seeds = np.random.default_rng([DOC["seed"], list(CASES).index(case_id)]).integers(0, 2**31, size=n)
    logits = torch.from_numpy(case_logits(case)).float().expand(n, 8, 1026).contiguous()
    codes, done = talker_step(
        logits,
        torch.full((n, 8), PREV_CODE),
        torch.full((n,), STEP),
        torch.full((n,), float(case["temperature"])),
        torch.full((n,), case["top_k"], dtype=torch.long),
        torch.full((n,), float(case["top_p"])),
        torch.from_numpy(seeds),
    )
    assert not done.any()
    return codes.numpy()


def oracle_probs(case: dict, codebook: int) -> np.ndarray:
    return filtered_distribution(case_logits(case), allowed_ids(codebook, ramping=False),
                                 case["temperature"], case["top_k"], case["top_p"])


def check_support(seen: set[int], support: set[int], tied: dict | None, what: str) -> None:
    tied_codes = set(tied["of"]) if tied else set()
    assert seen - support - tied_codes == set(), f"{what}: drew codes outside the support: {sorted(seen - support - tied_codes)}"
    assert support - seen == set(), f"{what}: never drew {sorted(support - seen)} of the support"
    if tied:
        kept = seen & tied_codes
        assert len(kept) == tied["count"], (
            f"{what}: kept {len(kept)} of the tied codes {sorted(tied_codes)} ({sorted(kept)}), the contract keeps {tied['count']}")


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("case", DOC["cases"], ids=lambda c: c["id"])
def test_the_oracle_derives_the_stated_support(case, group):
    """The hand-derived support and the oracle agree, so the frequencies below are measured against
    the contract and not against a second opinion."""
    support, tied = expected_support(case, group)
    oracle = {int(c) for c in np.flatnonzero(oracle_probs(case, GROUPS[group][0]))}
    check_support(oracle, support, tied, f"oracle, {case['id']}, {group}")


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("case", DOC["cases"], ids=lambda c: c["id"])
def test_draws_show_exactly_the_support(case, group):
    support, tied = expected_support(case, group)
    seen = {int(c) for c in np.unique(draws(case["id"])[:, GROUPS[group]])}
    check_support(seen, support, tied, f"{case['id']}, {group}")


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("case", DOC["cases"], ids=lambda c: c["id"])
def test_draw_frequencies_follow_the_renormalised_distribution(case, group):
    codes = draws(case["id"])[:, GROUPS[group]].ravel()
    probs = oracle_probs(case, GROUPS[group][0])
    logits = case_logits(case)
    classes = sorted({float(logits[c]) for c in np.flatnonzero(probs)} | {float(logits[c]) for c in codes})
    observed = [int(np.isin(codes, np.flatnonzero(logits == v)).sum()) for v in classes]
    expected = [float(probs[logits == v].sum()) for v in classes]
    if sum(p > 0 for p in expected) < 2:
        pytest.skip("a single class: nothing to compare (the support check covers it)")
    statistic, p = chi_square_p(observed, expected)
    limit = DOC["alpha"] / N_TESTS
    assert p >= limit, (f"{case['id']}, {group}: chi-square {statistic:.1f}, p = {p:.2e} < {limit:.1e}; "
                        f"counts {observed} for expected probabilities {np.round(expected, 4).tolist()}")


def test_the_p_values_agree_with_scipy():
    """The suite's own chi-square and KS p-values (conformance/talker/sampling_stats.py) equal scipy's."""
    stats = pytest.importorskip("scipy.stats")
    observed, probs = [480, 310, 210], [0.5, 0.3, 0.2]
    statistic, p = chi_square_p(observed, probs)
    ref = stats.chisquare(observed, np.array(probs) * sum(observed))
    assert statistic == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue, rel=1e-6)
    rng = np.random.default_rng(7)
    for sample in (rng.uniform(size=500), rng.uniform(size=2000) ** 1.1, rng.beta(1.0, 1.05, size=4000)):
        d, p = ks_uniform_p(sample)
        ref = stats.kstest(sample, "uniform")
        assert d == pytest.approx(ref.statistic)
        assert p == pytest.approx(ref.pvalue, rel=0.02, abs=1e-6)
