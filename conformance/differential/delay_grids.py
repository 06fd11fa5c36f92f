"""The delay-pattern check: apply and revert on random grids, ours against a foreign pair.

Ours is the oracle (conformance/oracles/delay_numpy.py) and the reference
(reference/codec/delay_pattern.py); the foreign side is any `apply(codes [8, T]) -> rows [T + 7, 8]`
and `revert(rows) -> codes [8, T]`. Exact: integers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from conformance.differential.inputs import delay_grids
from conformance.differential.verdicts import Check
from conformance.oracles import delay_numpy
from reference.codec import delay_pattern

TOLERANCE = "exact: every code equal, on grids of T = 0..40 frames"


def ours_apply(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the oracle's rows, the reference's rows) [T + 7, 8]."""
    return delay_numpy.delayed_rows(codes), delay_pattern.apply_delay(codes)


def ours_revert(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the oracle's frames, the reference's frames) [8, L - 7]."""
    return delay_numpy.undelayed_frames(rows), delay_pattern.revert_delay(rows)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def _where(ours: np.ndarray, theirs: np.ndarray) -> str:
    if ours.shape != theirs.shape:
        return f"shape ours {ours.shape} theirs {theirs.shape}"
    cells = np.argwhere(ours != theirs)
    first = tuple(int(i) for i in cells[0])
    return f"{len(cells)} cells differ, first at {first}: ours {ours[first]} theirs {theirs[first]}"


def run(apply: Callable[[np.ndarray], np.ndarray] | None, revert: Callable[[np.ndarray], np.ndarray]) -> Check:
    """Every grid through the foreign pair (apply may be None: revert only, on our oracle's rows)."""
    check = Check("delay_pattern", TOLERANCE + ("" if apply else "; revert only (it has no apply)"))
    for case_id, codes in delay_grids():
        oracle_rows, reference_rows = ours_apply(codes)
        problems = []
        if not _same(oracle_rows, reference_rows):
            problems.append(("ours_disagree", "apply: oracle vs reference: " + _where(oracle_rows, reference_rows)))
        if apply is not None:
            theirs_rows = np.asarray(apply(codes))
            if not _same(oracle_rows, theirs_rows):
                problems.append(("apply", "apply: " + _where(oracle_rows, theirs_rows)))
        try:
            theirs_frames = np.asarray(revert(oracle_rows))
        except Exception as exc:  # noqa: BLE001 (a foreign refusal is a result, recorded with its message)
            problems.append(("revert_raises", f"revert raises {type(exc).__name__}: {exc}"))
            check.add(case_id, "+".join(sorted({k for k, _ in problems})), "; ".join(d for _, d in problems))
            continue
        for name, frames in zip(("oracle", "reference"), ours_revert(oracle_rows)):
            if not _same(frames, theirs_frames):
                problems.append(("revert", f"revert ({name}): " + _where(frames, theirs_frames)))
        if not _same(theirs_frames, codes):
            problems.append(("round_trip", "their revert of our rows is not the grid: " + _where(codes, theirs_frames)))
        kinds = sorted({k for k, _ in problems})
        check.add(case_id, "+".join(kinds) if kinds else None, "; ".join(d for _, d in problems))
    return check
