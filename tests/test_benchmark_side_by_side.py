"""benchmarks/side_by_side.py: a stand-in talker stepping beside the real codec's carried decode, fed one batch of
chunks every chunk's worth of talker steps, in each arrangement (tiny shapes, CPU)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from benchmarks import side_by_side
from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from reference.codec.geometry import StreamGeometry
from reference.codec.stage import CodecStage
from reference.deploy.resolve import resolve_deployment

pytestmark = pytest.mark.cpu
SMALL = StreamGeometry(first_chunk_frames=2, chunk_frames=6, left_context_frames=10, right_holdback_frames=10,
                       growing_chunks=True)
CPU = torch.device("cpu")


def codec_load(batch: int, stage: CodecStage | None = None):
    stage = stage or CodecStage(fixture_codec(), batch, 2, SMALL)
    stage.warm()
    return side_by_side.codec_load(stage, batch)


def test_the_default_geometry_is_many_streams_v2s():
    shipped = resolve_deployment("many_streams_v2", "cuda").geometry
    assert StreamGeometry(*side_by_side.MANY_STREAMS_GEOMETRY, growing_chunks=True) == shipped


def test_each_codec_batch_is_every_streams_next_chunk_of_new_frames():
    stage = CodecStage(fixture_codec(), 3, 2, SMALL)
    load = codec_load(3, stage)
    with one_torch_thread():
        for _ in range(4):
            load.next()
    assert load.emitted == 4 * 6 and all(s.pushed == SMALL.right_holdback_frames + 4 * 6 for s in load.streams)
    load.close()
    assert stage.carried_slots_in_use == 0


def test_taking_turns_decodes_one_batch_after_every_chunks_worth_of_steps():
    load, talker = codec_load(2), side_by_side.Talker("tiny", 2, 16, CPU)
    with one_torch_thread():
        steps, batches = side_by_side.serial(talker, load, seconds=0.3)
    assert len(steps) >= 6 and len(batches) == len(steps) // 6
    assert all(batch[0] >= steps[6 * (i + 1) - 1][1] for i, batch in enumerate(batches))  # after its 6th step
    beside, apart = side_by_side.steps_beside(steps, batches)
    assert not beside and len(apart) == len(steps)  # taking turns: no step overlaps a batch
    load.close()


def test_a_codec_on_its_own_thread_never_runs_ahead_of_the_talkers_steps():
    load, talker = codec_load(2), side_by_side.Talker("tiny", 2, 16, CPU)
    with one_torch_thread():
        steps, batches = side_by_side.streams(talker, load, seconds=0.3)
    assert batches and len(batches) <= len(steps) // 6
    load.close()


def test_the_command_writes_a_row_for_each_mode_and_batch(tmp_path):
    args = ["--size", "tiny", "--batches", "2", "--seconds", "0.2", "--device", "cpu", "--geometry", "2", "6", "10", "10",
            "--tf32", "--label", "cpu", "--out-dir", str(tmp_path)]
    with one_torch_thread():
        assert side_by_side.main(args) == 0
    out = json.loads((tmp_path / "side_by_side-cpu.json").read_text())
    assert (tmp_path / "side_by_side-cpu.png").read_bytes().startswith(b"\x89PNG")
    rows = out["rows"]
    assert out["tf32"] is True and out["geometry"] == [2, 6, 10, 10]
    assert [(r["mode"], r["batch"]) for r in rows] == [(mode, 2) for mode in side_by_side.MODES]
    alone = rows[0]
    assert alone["steps"] > 0 and alone["codec_batches"] > 0 and alone["codec_owed"] is None
    for row in rows[1:]:
        assert row["steps"] > 0 and row["codec_owed"] == row["steps"] // 6 - row["codec_batches"] >= 0
        assert row["e2e_over_alone"] == pytest.approx(row["e2e_step_ms"] / alone["talker_step_ms"])
        window = row["timeline_ms"]
        assert window["talker"] and all(0 - 50 < a < b < 1000 * side_by_side.TIMELINE_S + 50 for a, b in window["talker"])


def test_talker_first_is_recorded_and_puts_this_process_below_normal_for_mps(tmp_path, monkeypatch):
    monkeypatch.delenv(side_by_side.MPS_PRIORITY, raising=False)
    args = ["--size", "tiny", "--batches", "2", "--seconds", "0.2", "--geometry", "2", "6", "10", "10",
            "--modes", "streams", "processes", "--talker-first", "--out-dir", str(tmp_path)]
    with one_torch_thread():
        assert side_by_side.main(args) == 0
    out = json.loads((tmp_path / "side_by_side.json").read_text())
    assert out["talker_first"] is True and [r["mode"] for r in out["rows"]] == ["streams", "processes"]
    assert all(r["steps"] > 0 for r in out["rows"])
    assert os.environ[side_by_side.MPS_PRIORITY] == "1"


def test_a_step_is_beside_a_codec_batch_when_their_times_overlap():
    steps = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
    batches = [(1.5, 1.7), (3.9, 5.0)]
    beside, apart = side_by_side.steps_beside(steps, batches)
    assert beside == [1000.0, 1000.0] and apart == [1000.0, 1000.0]
    assert side_by_side.steps_beside([(0.0, 2.0), (2.0, 4.0)], [(1.0, 3.0)]) == ([2000.0, 2000.0], [])


def test_the_timeline_keeps_the_window_from_the_middle_of_the_run():
    steps = [(t / 4, (t + 1) / 4) for t in range(4)]  # 0 .. 1 s: the middle 0.5 s is 0.25 .. 0.75 s
    kept = side_by_side.timeline(steps, [(0.0, 0.125), (0.5, 0.625)], window_s=0.5)
    assert kept == {"talker": [[0.0, 250.0], [250.0, 500.0]], "codec": [[250.0, 375.0]]}


def test_alone_comes_first_when_asked_for():
    with pytest.raises(SystemExit):
        side_by_side.parse_args(["--modes", "serial", "alone", "--out-dir", "x"])
