"""The benchmark's CPU smoke (`python -m benchmarks --cpu-smoke`) as CI runs it: a subprocess with a
time limit, the tiny checkpoint, Model Runner V1, talker and bare Qwen3. Checks the shape of the
JSON and that the PNG is one; nothing about speed (a benchmark is not a test)."""

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
    assert set(talker["e2e"][0]) >= {"ttfa_ms_median", "rtf_median", "audio_s_per_s"}
    for lvl in talker["e2e"]:  # TTFA's parts come in order: rows, the first window's frames, audio
        assert 0 < lvl["first_rows_ms_median"] <= lvl["window_ms_median"] <= lvl["ttfa_ms_median"], lvl
    levels = [(lvl["sampling"], lvl["concurrency"]) for lvl in talker["engine"]]
    assert levels == [("greedy", 1), ("greedy", 2), ("default", 1), ("default", 2)]
    assert [(lvl["sampling"], lvl["concurrency"]) for lvl in bare["engine"]] == levels
    assert [(r["sampling"], r["concurrency"]) for r in results["ratios"]] == levels
    assert all(r["ratio"] > 0 for r in results["ratios"])
    assert [b["concurrency"] for b in results["backbone_bound"]] == [1, 2]
    assert results["checkpoint"]["frame_s"] == pytest.approx(0.04)


def test_the_plot_is_a_png(smoke):
    _, out = smoke
    assert (out / "speed.png").read_bytes()[:8] == PNG_SIGNATURE
