"""The differential machinery itself (conformance/differential/): how a difference is named and judged.

The foreign implementations run in their own environments (tox -e diff-*); these checks feed the
same classifiers hand-made foreign behaviour, so that a wrong verdict here cannot hide there.
"""

import numpy as np
import pytest

from conformance.differential import delay_grids, state_machine
from conformance.differential.inputs import scenario_logits, scenarios
from conformance.differential.verdicts import AGREE, CANNOT, NEW, PINNED, judge
from conformance.oracles import delay_numpy

pytestmark = pytest.mark.cpu

PINS = [{"id": "p", "implementation": "x", "check": "c", "difference": "known", "source": "f.py:1", "ours": "o"}]


def recorded(*differences):
    return {"check": "c", "tolerance": "t", "cannot_run": None,
            "cases": [{"id": f"k{i}", "equal": d is None, "difference": d, "detail": ""} for i, d in enumerate(differences)]}


@pytest.mark.parametrize("differences, status", [
    ((None, None), AGREE),
    ((None, "known"), PINNED),
    (("known", "other"), NEW),
    (("unexplained",), NEW),
])
def test_judge(differences, status):
    assert judge("x", recorded(*differences), PINS)[0] == status


def test_a_pin_counts_only_for_its_implementation_and_check():
    assert judge("y", recorded("known"), PINS)[0] == NEW
    assert judge("x", {**recorded("known"), "check": "d"}, PINS)[0] == NEW


def test_cannot_run_keeps_its_reason():
    assert judge("x", {"check": "c", "cannot_run": "why", "cases": []}, PINS) == (CANNOT, "why")


def test_the_oracle_as_foreign_pair_agrees():
    check = delay_grids.run(delay_numpy.delayed_rows, delay_numpy.undelayed_frames)
    assert len(check.cases) == 41 * 5 and all(c.equal for c in check.cases)


def test_a_revert_shifted_by_one_is_named():
    def shifted(rows):
        frames = delay_numpy.undelayed_frames(rows)
        return np.roll(frames, 1, axis=1)

    check = delay_grids.run(None, shifted)
    differing = [c for c in check.cases if not c.equal]
    assert differing and all("revert" in c.difference for c in differing)
    assert all(c.equal for c in check.cases if c.id.startswith(("T0_", "T1_")))  # a roll of 0 or 1 frame is no change


def test_ours_is_equal_to_itself_and_upstreams_ramp_down_is_named():
    for scenario in scenarios():
        logits = scenario_logits(scenario)
        rows = state_machine.ours(logits)
        assert state_machine.classify(logits, rows) == (None, f"{len(rows)} rows equal")
        difference = state_machine.classify(logits, state_machine.ours(logits, "upstream"))[0]
        has_eoc = any(s["codebook"] == 0 and s["code"] == "eoc" for s in scenario["spikes"])
        assert difference == ("ramp_down_max1" if has_eoc else None), scenario["id"]


def test_a_foreign_row_with_boc_on_an_active_codebook_is_named():
    scenario = next(s for s in scenarios() if s["id"] == "eoc_at_step_20")
    logits = scenario_logits(scenario)
    rows = state_machine.ours(logits, "upstream")
    rows[10][3] = 1024
    assert state_machine.classify(logits, rows)[0] == "boc_not_masked"
    rows[10][3] = (rows[10][3] + 1) % 1024  # a plain wrong code
    assert state_machine.classify(logits, rows)[0] == "unexplained"
