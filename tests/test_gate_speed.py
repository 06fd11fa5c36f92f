"""The gate's speed figures (conformance/gate/speed.py) from a benchmark's speed.json: ratios
of medians, tolerances from the run's own spread, and a slower candidate turning the diff red."""

import copy

import pytest

from conformance.gate import diff as gate_diff, speed as gate_speed


def speed(talker_steps=(5.0, 4.0, 4.5), bare_steps=(3.0, 3.0, 3.0), v2_ttfa=(300, 250, 350), v1_ttfa=(500, 600, 550)):
    def engine(samples):
        return [{"sampling": "default", "concurrency": c, "ms_per_step": sorted(samples)[1],
                 "ms_per_step_samples": list(samples)} for c in gate_speed.LEVELS]

    def e2e(ttfa, audio):
        return [{"concurrency": 16, "ttfa_ms_median": sorted(ttfa)[1], "audio_s_per_s": audio,
                 "rounds": [{"ttfa_ms_median": t, "audio_s_per_s": audio} for t in ttfa]}]

    return {"vllm_version": "0.26.0", "phases": [
        {"name": "talker/default", "status": "ok", "engine": engine(talker_steps), "e2e": e2e(v2_ttfa, 100.0)},
        {"name": "bare/default", "status": "ok", "engine": engine(bare_steps), "e2e": []},
        {"name": "talker/high_throughput", "status": "ok", "engine": [], "e2e": e2e(v1_ttfa, 20.0)}]}


def test_ratios_of_medians_with_the_spread_as_tolerance():
    figures = gate_speed.figures(speed())
    step = figures["speed::talker_over_bare_step[c=16]"]
    assert step["value"] == 1.5  # 4.5 / 3.0
    assert step["tolerance"] == pytest.approx(gate_speed.SPREAD_FACTOR * (5.0 / 3 - 4.0 / 3) / 2, abs=1e-3)
    assert figures["speed::v2_over_v1_ttfa[c=16]"]["value"] == pytest.approx(300 / 550, abs=1e-3)
    assert figures["speed::v2_over_v1_audio_s_per_s[c=16]"]["value"] == 5.0
    # identical samples: no spread, the floor
    assert figures["speed::v2_over_v1_audio_s_per_s[c=16]"]["tolerance"] == pytest.approx(gate_speed.FLOOR * 5.0)


def test_a_phase_that_did_not_finish_is_an_error():
    broken = speed()
    broken["phases"][1]["status"] = "timeout"
    with pytest.raises(ValueError, match="bare/default did not finish"):
        gate_speed.figures(broken)


def test_a_slower_talker_is_a_finding_and_noise_is_not():
    baseline = {"checks": {}, "figures": gate_speed.figures(speed())}
    same = {"checks": {}, "figures": gate_speed.figures(speed(talker_steps=(4.8, 4.2, 4.6)))}
    slower = copy.deepcopy(baseline)
    slower["figures"] = gate_speed.figures(speed(talker_steps=(7.0, 6.5, 6.8)))
    assert not gate_diff.diff(baseline, same).moved
    moved = {name for name, *_ in gate_diff.diff(baseline, slower).moved}
    assert moved == {f"speed::talker_over_bare_step[c={c}]" for c in gate_speed.LEVELS}


def test_a_moved_ratio_names_the_side_that_moved():
    """V2/V1 audio s/s doubling because V1 halved reads as V1's change, not V2's."""
    baseline = {"platform": "cuda", "vllm": "0.26.0", "torch": "t", "checks": {}, "counts": {},
                "figures": gate_speed.figures(speed())}
    slower_v1 = speed()
    v1 = slower_v1["phases"][2]["e2e"][0]
    v1["rounds"] = [{**r, "audio_s_per_s": 10.0} for r in v1["rounds"]]
    candidate = {**baseline, "vllm": "0.33.0", "figures": gate_speed.figures(slower_v1)}
    d = gate_diff.diff(baseline, candidate)
    assert [name for name, *_ in d.moved] == ["speed::v2_over_v1_audio_s_per_s[c=16]"]
    line = next(x for x in gate_diff.render(baseline, candidate, d) if "v2_over_v1_audio_s_per_s" in x)
    assert line.endswith("; V2 default 100.0 -> 100.0, V1 high_throughput 20.0 -> 10.0 audio s/s"), line
