"""The codec-speed benchmark (benchmarks/codec_speed.py) times the stage's own decode on windows
of the geometry's steady length and turns it into the stage's capacity; tiny codec, CPU (eager:
the CUDA graph path runs on the GPU only)."""

import copy
import json

import pytest
import torch

from benchmarks import codec_speed
from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from reference.codec.geometry import StreamGeometry

pytestmark = pytest.mark.cpu
SMALL = StreamGeometry(first_chunk_frames=2, chunk_frames=6, left_context_frames=10, right_holdback_frames=10)


def test_each_batch_decodes_steady_windows_and_reports_the_stages_capacity():
    codec, decoded = fixture_codec(), []
    real = codec.decode_batch
    codec.decode_batch = lambda codes: decoded.append(tuple(codes.shape)) or real(codes)
    with one_torch_thread():
        rows = codec_speed.measure(codec, SMALL, [1, 3], repeats=2, step_ms=4.0)
    warm = [(1, 8, n) for n in (12, 18, 24, 26)]  # the stage's warm-up: each length a stream's cuts take
    assert decoded[:4] == warm and decoded[4:] == [(1, 8, 26)] * (3 + 2) + [(3, 8, 26)] * (3 + 2)  # + timed
    assert [(r["batch"], r["path"], r["decoded_frames"]) for r in rows] == [
        (1, "eager", 26), (1, "carried", 6), (3, "eager", 26), (3, "carried", 6)]  # carried: the new frames alone
    for row in rows:
        low, high = row["spread_ms"]
        batch = row["batch"]
        assert 0 < low <= row["ms_per_decode"] <= high and row["new_frames"] == 6
        assert row["ms_per_new_frame"] == pytest.approx(row["ms_per_decode"] / (batch * 6))
        assert row["capacity_audio_s_per_s"] == pytest.approx(batch * 6 * 0.04 / (row["ms_per_decode"] / 1000))
        assert row["talker_audio_s_per_s"] == pytest.approx(batch * 0.04 / 0.004)


def test_the_carried_path_times_steady_chunks_of_new_frames_alone():
    codec, steps = fixture_codec(), []
    stage = codec_speed.CodecStage(codec, 2, 2, SMALL)
    decoder = stage._pool.decoder if stage._pool else None
    with one_torch_thread():
        stream = stage.carried_stream(SMALL)
        real = stream.pool.decoder.step
        stream.pool.decoder.step = lambda hidden, *rest: steps.append(tuple(hidden.shape)) or real(hidden, *rest)
        samples = codec_speed.time_carried(stage, torch.zeros(2, 8, 6, dtype=torch.long), repeats=2, warmup=1)
    assert decoder is None and len(samples) == 2
    assert steps == [(2, 256, 10)] + [(2, 256, 6)] * 3  # the first chunk's look-ahead, then 1 + 2 chunks
    assert stage.carried_slots_in_use == 0


def test_the_command_writes_its_figures(tmp_path):
    with one_torch_thread():
        assert codec_speed.main(["--size", "tiny", "--batches", "2", "--repeats", "1", "--platform", "cpu",
                                 "--out-dir", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "codec_speed.json").read_text())
    assert out["device"] == "cpu" and [r["batch"] for r in out["rows"]] == [2]
    assert out["rows"][0]["decoded_frames"] == 25 + 25 + 4  # default on a CPU: the V1 geometry
    assert [r["path"] for r in out["rows"]] == ["eager"]  # its holdback is short of the reach: windows only
    assert out["tf32"] is False and set(out["agreement"]) == {"frames", "stream_vs_offline"}
    assert out["agreement"]["stream_vs_offline"]["snr_db"] < 100  # the V1 geometry stitches lossily


def test_the_stream_vs_offline_figure_holds_the_case_bound_where_the_geometry_stitches_exactly():
    codec = copy.deepcopy(fixture_codec())
    with one_torch_thread():
        exact = codec_speed.stream_vs_offline(codec, SMALL, 40)["stream_vs_offline"]
        codec.tf32 = True  # no arithmetic changes on the CPU: the float32 comparisons hold the same bound
        found = codec_speed.stream_vs_offline(codec, SMALL, 40)
    assert exact["snr_db"] >= 100 and exact["max_abs_err"] <= 1e-5
    assert set(found) == {"frames", "stream_vs_offline", "stream_vs_float32", "offline_vs_float32"}
    assert found["offline_vs_float32"]["max_abs_err"] == 0.0 and found["stream_vs_float32"]["snr_db"] >= 100
    assert codec.tf32 is True  # given back as it was
