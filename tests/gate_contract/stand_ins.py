"""The stand-in suite of tests/test_gate_contract.py: five checks that do what $GATE_CASE_PLAN (JSON,
check name -> plan) says, so that the real gate (conformance/gate/__main__.py, gate_run.py, gate_watch.py,
gate_diff.py) can be run on every outcome in seconds. Not collected by the suite (no test_ prefix):
the gate names it.

A plan is "pass", "fail", "error" (its fixture raises), "hang" (it waits on a child process until the
gate's per-test limit or deadline ends it), or {does: <one of those>, figure: <value>}: the figure
(snr_db, measured, tolerance 1 dB) is recorded first, whatever the check then does.
"""

import json
import os
import subprocess

import pytest

PLAN = json.loads(os.environ.get("GATE_CASE_PLAN", "{}"))
TOLERANCE_DB = 1.0


@pytest.fixture
def planned(request, record_property):
    step = PLAN.get(request.node.name, "pass")
    step = {"does": step} if isinstance(step, str) else {"does": "pass", **step}
    if "figure" in step:
        record_property("figure:snr_db", {"class": "measured", "value": step["figure"], "unit": "dB",
                                          "tolerance": TOLERANCE_DB})
    if step["does"] == "error":
        raise RuntimeError(f"{request.node.name}: its fixture broke (planted)")
    return step["does"]


def act(does: str) -> None:
    if does == "fail":
        raise AssertionError("planted failure")
    if does == "hang":
        subprocess.run(["sleep", "600"], check=True)


def test_a(planned):
    act(planned)


def test_b(planned):
    act(planned)


def test_c(planned):
    act(planned)


def test_d(planned):
    act(planned)


def test_e(planned):
    act(planned)
