"""The differential results (tox -e differential) as checks of the main job: the table in the report.

The foreign implementations run in environments of their own (conformance/differential/, tox -e
diff-*); here, beside vLLM, their recorded results (golden/differential/) are judged against the
pinned upstream differences (conformance/cases/differential/pinned.yaml). A result recorded for
other goldens or oracles than today's is stale: the confirmation it gave is void.
"""

import pytest

from conformance.differential.verdicts import (
    CANNOT,
    IMPLEMENTATIONS,
    NEW,
    inputs_sha256,
    judge,
    read_pins,
    read_results,
    table,
)

pytestmark = pytest.mark.cpu


@pytest.mark.parametrize("implementation", sorted(IMPLEMENTATIONS))
def test_recorded_results_are_current(implementation):
    doc = read_results(implementation)
    command = f"tox -e {IMPLEMENTATIONS[implementation]}"
    assert doc is not None, f"no golden/differential/{implementation}.json: run `{command}`"
    assert doc["inputs_sha256"] == inputs_sha256(implementation=implementation), (
        f"golden/differential/{implementation}.json was recorded for other goldens or oracles: run `{command}`")


def test_no_new_difference(record_property):
    """Every check of every implementation agrees, differs as pinned, or cannot run (with why)."""
    lines = table()
    for line in lines:
        record_property("report", line)
    pins = read_pins()
    new = [f"{impl} {c['check']}: {judge(impl, c, pins)[1]}" for impl in IMPLEMENTATIONS
           if (doc := read_results(impl)) for c in doc["checks"] if judge(impl, c, pins)[0] == NEW]
    assert not new, ("differences nobody pinned (fix the defect here, or pin the upstream difference with "
                     "its source):\n" + "\n".join(new))


def test_every_golden_confirmed_by_a_foreign_implementation():
    """The codec goldens, the delay pattern, the state machine and the talker goldens: each agrees
    with, or differs as pinned from, at least one implementation nobody here wrote."""
    pins = read_pins()
    for check in ("codec_decode", "delay_pattern", "state_machine", "talker_streams"):
        statuses = {impl: judge(impl, c, pins)[0] for impl in IMPLEMENTATIONS
                    if (doc := read_results(impl)) for c in doc["checks"] if c["check"] == check}
        assert any(s not in (CANNOT, NEW) for s in statuses.values()), f"{check}: no foreign confirmation: {statuses}"


def test_every_pin_is_still_seen():
    """A pinned difference that no recorded sub-case shows any more is stale: remove it or find why."""
    seen = {(impl, c["check"], case["difference"]) for impl in IMPLEMENTATIONS if (doc := read_results(impl))
            for c in doc["checks"] for case in c["cases"] if not case["equal"]}
    stale = [p["id"] for p in read_pins() if (p["implementation"], p["check"], p["difference"]) not in seen]
    assert not stale, f"pins no recorded result shows: {stale}"
