"""The generation state machine check: the same greedy logits, step by step, ours against theirs.

Ours is the oracle's contract (conformance/oracles/talker_contract.py, `contract_row`), whose
ramp-down is the training layout (row j after the EOC row has j + 1 leading EOCs, then EOS after
an all-EOC row); the oracle also states upstream's variant (max(1, j) leading EOCs). A foreign
implementation is any `step(logits [8, 1026]) -> (row [8], done)`, fresh per scenario; `done`
means its next LM token ends the audio, the row itself is still emitted.

How a differing stream differs (the ids pinned in conformance/cases/differential/pinned.yaml):
    ramp_down_max1          equal to ours with upstream's ramp-down
    lead_in_kept_in_ramp_down  BOC still forced on waiting codebooks after an EOC in the lead-in
    eoc_not_masked          EOC taken on a codebook other than 0 (ours masks it)
    boc_not_masked          BOC taken on an active codebook (ours masks it)
    unexplained             none of these
Exact: integer rows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from conformance.differential.inputs import BOC, EOC, NUM_CODEBOOKS, scenario_logits, scenarios
from conformance.differential.verdicts import Check
from conformance.oracles.talker_contract import contract_row

TOLERANCE = "exact: every row of 8 codes and the step that ends the audio"
Stepper = Callable[[np.ndarray], tuple[list[int], bool]]


def ours(logits: np.ndarray, ramp_down: str = "training") -> list[list[int]]:
    """The rows the oracle's contract emits for these logits [steps, 8, 1026]."""
    rows, remaining = [], None
    for step in range(logits.shape[0]):
        row, remaining = contract_row(torch.from_numpy(logits[step]), step, remaining, ramp_down=ramp_down)
        if row is None:
            break
        rows.append([int(c) for c in row])
    return rows


def theirs(logits: np.ndarray, step: Stepper) -> list[list[int]]:
    rows = []
    for s in range(logits.shape[0]):
        row, done = step(logits[s])
        rows.append([int(c) for c in row])
        if done:
            break
    return rows


def _explain(mine: list[list[int]], other: list[list[int]]) -> str:
    a = np.array(mine, dtype=np.int64).reshape(-1, NUM_CODEBOOKS)
    b = np.array(other, dtype=np.int64).reshape(-1, NUM_CODEBOOKS)
    n = min(len(a), len(b))
    diff = np.argwhere(a[:n] != b[:n])
    if len(diff) == 0:
        return f"{len(a)} rows ours, {len(b)} theirs, equal up to row {n}"
    r, q = (int(i) for i in diff[0])
    return f"{len(a)} rows ours, {len(b)} theirs; first difference row {r} codebook {q}: ours {a[r, q]} theirs {b[r, q]}"


def _first_eoc_row(rows: np.ndarray) -> int:
    hits = np.flatnonzero((rows == EOC).any(axis=1))
    return int(hits[0]) if len(hits) else len(rows)


def classify(logits: np.ndarray, other: list[list[int]]) -> tuple[str | None, str]:
    """(difference id or None, detail) for one scenario's foreign rows. No feedback here (the logits
    are fixed per step), so a difference can be read cell by cell against upstream's variant."""
    training, upstream = ours(logits), ours(logits, "upstream")
    if other == training:
        return None, f"{len(other)} rows equal"
    if other == upstream:
        return "ramp_down_max1", "equal to ours with upstream's ramp-down: " + _explain(training, other)
    a = np.array(upstream, dtype=np.int64).reshape(-1, NUM_CODEBOOKS)
    b = np.array(other, dtype=np.int64).reshape(-1, NUM_CODEBOOKS)
    detail = "vs ours with upstream's ramp-down: " + _explain(upstream, other)
    eoc_row = _first_eoc_row(a)
    if _first_eoc_row(b) < eoc_row:
        return "eoc_not_masked", "EOC taken on a codebook ours masks: " + detail
    if len(a) != len(b):
        return "unexplained", detail
    step = np.arange(len(b))[:, None]
    q = np.arange(NUM_CODEBOOKS)[None, :]
    differs = a != b
    if (differs & ((b == BOC) & (q <= step))).any() and not (differs & ~((b == BOC) & (q <= step))).any():
        return "boc_not_masked", "BOC taken on an active codebook: " + detail
    kept = (b == BOC) & (q > step) & (step >= eoc_row)
    if (differs & kept).any() and not (differs & ~kept).any():
        return "lead_in_kept_in_ramp_down", "BOC still forced on waiting codebooks after an EOC in the lead-in: " + detail
    return "unexplained", detail


def run(make_stepper: Callable[[], Stepper]) -> Check:
    check = Check("state_machine", TOLERANCE)
    for scenario in scenarios():
        logits = scenario_logits(scenario)
        difference, detail = classify(logits, theirs(logits, make_stepper()))
        check.add(scenario["id"], difference, detail)
    return check
