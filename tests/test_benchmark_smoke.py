"""The benchmark's CPU smoke (`python -m benchmarks --cpu-smoke`) as CI runs it: a subprocess with a
time limit, the tiny checkpoint, Model Runner V1, talker and bare Qwen3, three rounds. Checks the
shape of the JSON (TTFA's split adding up, each figure's range over the rounds) and that the PNG is
one; nothing about speed (a benchmark is not a test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cpu, pytest.mark.dummy_weights, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    run = subprocess.run([sys.executable, "-m", "benchmarks", "--cpu-smoke", "--platform", "cpu", "--out-dir", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    return run, out


def test_every_phase_finishes(smoke):
    run, out = smoke
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((out / "speed.json").read_text())
    assert [(p["name"], p["status"]) for p in results["phases"]] == [
        ("talker/high_throughput", "ok"), ("bare/high_throughput", "ok")]


def test_the_json_holds_every_figure(smoke):
    _, out = smoke
    results = json.loads((out / "speed.json").read_text())
    for key in ("command", "date", "platform", "device", "vllm_version", "torch_version", "checkpoint", "settings",
                "wall_s", "phases", "ratios", "backbone_bound"):
        assert key in results, key
    talker, bare = results["phases"]
    assert talker["runner"] == bare["runner"] == "v1"
    assert talker["engine_kwargs"]["max_num_seqs"] == bare["engine_kwargs"]["max_num_seqs"]
    assert [lvl["concurrency"] for lvl in talker["e2e"]] == [1, 2]
    assert set(talker["e2e"][0]) >= {"ttfa_ms_median", "rtf_median", "audio_s_per_s", "split_ms", "spread"}
    for lvl in talker["e2e"]:  # the CPU stage decodes eagerly: no CUDA graph to replay
        assert sum(lvl["codec_batches"].values()) > 0 and lvl["codec_replayed"] == 0, lvl
    levels = [(lvl["sampling"], lvl["concurrency"]) for lvl in talker["engine"]]
    assert levels == [("greedy", 1), ("greedy", 2), ("default", 1), ("default", 2)]
    assert [(lvl["sampling"], lvl["concurrency"]) for lvl in bare["engine"]] == levels
    assert [(r["sampling"], r["concurrency"]) for r in results["ratios"]] == levels
    for r in results["ratios"]:  # a quotient of the two medians (their sign is the machine's noise on a busy CPU)
        assert r["ratio"] == pytest.approx(r["talker_ms_per_step"] / r["bare_ms_per_step"]), r
    assert [b["concurrency"] for b in results["backbone_bound"]] == [1, 2]
    assert results["checkpoint"]["frame_s"] == pytest.approx(0.04)


def test_ttfa_splits_in_five_parts_that_add_up(smoke):
    _, out = smoke
    results = json.loads((out / "speed.json").read_text())
    assert results["settings"]["rounds"] == 3
    for lvl in results["phases"][0]["e2e"]:
        for figures in (lvl, *lvl["rounds"]):  # the level's median and each round's
            split = figures["split_ms"]
            assert list(split) == ["admission", "prefill", "first_rows", "first_window", "first_pcm"]
            assert all(ms >= 0 for ms in split.values()), split
            assert split["admission"] > 0 and split["prefill"] > 0 and split["first_rows"] > 0, \
                "the engine admits, prefills, then hands the rows out"
            assert sum(split.values()) == pytest.approx(figures["ttfa_ms_median"], abs=1e-6)


def test_every_figure_has_its_range_over_three_rounds(smoke):
    _, out = smoke
    results = json.loads((out / "speed.json").read_text())
    talker, bare = results["phases"]
    for lvl in talker["e2e"]:
        assert len(lvl["rounds"]) == 3 and lvl["streams"] == 3 * lvl["concurrency"]
        spread = lvl["spread"]
        for key, median in (("ttfa_ms", "ttfa_ms_median"), ("rtf", "rtf_median"), ("audio_s_per_s", "audio_s_per_s")):
            assert spread[key] == [min(r[median] for r in lvl["rounds"]), max(r[median] for r in lvl["rounds"])]
            assert spread[key][0] <= lvl[median] <= spread[key][1], (key, lvl)
        for part, (low, high) in spread["split_ms"].items():
            assert 0 <= low <= high and low <= lvl["split_ms"][part] <= high, (part, lvl)
    for lvl in talker["engine"] + bare["engine"]:
        assert len(lvl["ms_per_step_samples"]) == 3
        assert lvl["spread"]["ms_per_step"] == [min(lvl["ms_per_step_samples"]), max(lvl["ms_per_step_samples"])]


def test_the_plot_is_a_png(smoke):
    _, out = smoke
    assert (out / "speed.png").read_bytes()[:8] == PNG_SIGNATURE
