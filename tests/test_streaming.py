"""The streaming decoder: when chunks are cut, their sizes, trimming, and the receptive field."""

import math

import pytest
import torch

from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from reference.codec.geometry import DEFAULT_GEOMETRY, UPSTREAM_V1, StreamGeometry
from reference.codec.streaming import (
    StreamingDecoder,
    agreement,
    decoder_context_frames,
    stitched_stream,
    stream_chunks,
)

pytestmark = pytest.mark.cpu
HOP = 960


@pytest.fixture(autouse=True)
def _single_thread():
    with one_torch_thread():
        yield


def codes_of(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 1024, (8, frames), generator=torch.Generator().manual_seed(seed))


def chunk_log(geometry: StreamGeometry, frames: int) -> list[tuple[int, int]]:
    """(frames received when the chunk was cut or -1 for finish, chunk frames) for one-frame pushes."""
    decoder = StreamingDecoder(fixture_codec(), geometry)
    codes, log = codes_of(frames), []
    for t in range(frames):
        log += [(t + 1, len(c) // HOP) for c in decoder.push(codes[:, t : t + 1])]
    return log + [(-1, len(c) // HOP) for c in decoder.finish()]


def test_chunks_are_cut_once_their_holdback_has_arrived():
    g = StreamGeometry(first_chunk_frames=8, chunk_frames=25, left_context_frames=10, right_holdback_frames=3)
    assert chunk_log(g, 70) == [(11, 8), (36, 25), (61, 25), (-1, 12)]


def test_without_holdback_chunks_are_cut_as_soon_as_they_are_complete():
    g = StreamGeometry(first_chunk_frames=1, chunk_frames=4, left_context_frames=2, right_holdback_frames=0)
    assert chunk_log(g, 10) == [(1, 1), (5, 4), (9, 4), (-1, 1)]


def test_finish_cuts_the_rest_in_usual_sizes_with_the_look_ahead_left():
    g = StreamGeometry(first_chunk_frames=8, chunk_frames=5, left_context_frames=0, right_holdback_frames=10)
    assert chunk_log(g, 20) == [(18, 8), (-1, 5), (-1, 5), (-1, 2)]


def test_a_stream_shorter_than_the_first_chunk_comes_out_at_finish():
    assert chunk_log(DEFAULT_GEOMETRY, 3) == [(-1, 3)]
    assert chunk_log(DEFAULT_GEOMETRY, 0) == []


def test_chunks_concatenate_to_t_times_960_samples_whatever_the_push_size():
    codes = codes_of(40, seed=1)
    one = stream_chunks(fixture_codec(), codes, UPSTREAM_V1, frames_per_push=1)
    many = stream_chunks(fixture_codec(), codes, UPSTREAM_V1, frames_per_push=7)
    assert sum(len(c) for c in one) == 40 * HOP
    assert len(one) == len(many) and all(torch.equal(a, b) for a, b in zip(one, many))


def test_first_chunk_is_exact_when_no_left_context_exists_yet():
    codes = codes_of(30, seed=2)
    g = StreamGeometry(first_chunk_frames=8, chunk_frames=25, left_context_frames=0, right_holdback_frames=10)
    first = stream_chunks(fixture_codec(), codes, g)[0]
    offline = fixture_codec().decode(codes)
    torch.testing.assert_close(first, offline[: 8 * HOP], atol=1e-5, rtol=0)


def test_receptive_field_formula_matches_an_impulse_measurement():
    left, right = decoder_context_frames(fixture_codec().cfg)
    assert (left, right) == (10, 10)
    codes = codes_of(41, seed=3)
    moved = codes.clone()
    moved[:, 20] = (moved[:, 20] + 1) % 1024
    changed = (fixture_codec().decode(moved) - fixture_codec().decode(codes)).abs() > 0  # [41 * 960]
    samples = changed.nonzero()[:, 0]
    # Frame 20 reaches the frames whose samples depend on it: 20 - right .. 20 + left.
    assert (int(samples.min()) // HOP, int(samples.max()) // HOP) == (20 - right, 20 + left)


def test_context_equal_to_the_receptive_field_reproduces_the_offline_decode():
    codes = codes_of(60, seed=4)
    offline = fixture_codec().decode(codes)
    exact = agreement(stitched_stream(fixture_codec(), codes, DEFAULT_GEOMETRY), offline)
    assert exact.max_abs_err < 1e-5 and exact.snr_db > 100
    short = StreamGeometry(first_chunk_frames=8, chunk_frames=25, left_context_frames=9, right_holdback_frames=9)
    assert agreement(stitched_stream(fixture_codec(), codes, short), offline).max_abs_err > 1e-5


def test_agreement_numbers():
    ones = torch.ones(100)
    assert agreement(ones, ones).snr_db == math.inf and agreement(ones, ones).max_abs_err == 0.0
    off = agreement(ones * 1.1, ones)  # noise power 0.01 of the signal's
    assert off.snr_db == pytest.approx(20.0) and off.max_abs_err == pytest.approx(0.1)
    with pytest.raises(ValueError, match="lengths must match"):
        agreement(ones[:5], ones)


def test_misuse_is_an_error():
    decoder = StreamingDecoder(fixture_codec(), DEFAULT_GEOMETRY)
    with pytest.raises(ValueError, match=r"\[0, 0\]=1025"):
        decoder.push(torch.full((8, 1), 1025))
    decoder.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        decoder.push(codes_of(1))
    with pytest.raises(RuntimeError, match="twice"):
        decoder.finish()


def test_growing_chunks_double_up_to_the_chunk_size():
    g = StreamGeometry(first_chunk_frames=8, chunk_frames=25, left_context_frames=10, right_holdback_frames=10,
                       growing_chunks=True)
    assert chunk_log(g, 100) == [(18, 8), (26, 8), (42, 16), (67, 25), (92, 25), (-1, 18)]
    one = StreamGeometry(first_chunk_frames=1, chunk_frames=25, left_context_frames=10, right_holdback_frames=10,
                         growing_chunks=True)
    assert [size for _, size in chunk_log(one, 120)] == [1, 1, 2, 4, 8, 16, 25, 25, 25, 13]
    assert (g.ramp_frames(), one.ramp_frames(), UPSTREAM_V1.ramp_frames()) == (32, 32, 1)
    with pytest.raises(ValueError, match="growing_chunks must be a bool, got 1"):
        StreamGeometry(8, 25, 10, 10, growing_chunks=1)


def stalls_at(geometry: StreamGeometry, step_s: float, frames: int = 257) -> list[float]:
    """The stalls of a player fed by the cutter while the talker makes one frame every `step_s`
    (decoding and sending taken as instant): benchmarks/served.py's definition of a stall."""
    from benchmarks.served import stalls
    from reference.codec.streaming import ChunkCutter

    cutter, chunks = ChunkCutter(geometry, 8), []
    for t in range(1, frames + 1):
        cutter.add(torch.zeros(8, 1, dtype=torch.long))
        chunks += [(t * step_s, w.emit_frames * 2 * HOP) for w in cutter.windows()]
    return stalls(chunks, bytes_per_s=2 * 24000)


def test_growing_chunks_never_stall_while_a_step_takes_at_most_half_a_frame():
    low_latency_v2 = StreamGeometry(1, 25, 10, 10, growing_chunks=True)
    for geometry in (DEFAULT_GEOMETRY, low_latency_v2):
        assert all(stalls_at(geometry, step) == [] for step in (0.0037, 0.010, 0.020))
    # Upstream's chunking: the 25-frame second chunk comes 25 steps after a 1-frame first one. At the
    # H200's 3.7 ms a step (1 stream) that is a 53 ms stall; served, low_latency_v2 stalled 55 ms.
    fixed = StreamGeometry(1, 25, 10, 10)
    assert stalls_at(fixed, 0.0037) == [pytest.approx(25 * 0.0037 - 0.040)]
    # Above half real time the doubling outruns the talker: 64 streams starting together on the
    # H200 (31 ms a step) still stall, less than with a 25-frame second chunk.
    slow = sum(stalls_at(DEFAULT_GEOMETRY, 0.031))
    assert 0 < slow < sum(stalls_at(StreamGeometry(8, 25, 10, 10), 0.031))
