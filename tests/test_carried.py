"""The carried decoder (reference/codec/carried.py): each frame decoded once, the stream the
offline decode however it is pushed; its states, slots and refusals."""

import pytest
import torch

from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from reference.codec.carried import CarriedDecoder, CarriedStream, CarriedStreamingDecoder, StatePool, advance
from reference.codec.geometry import DEFAULT_GEOMETRY, UPSTREAM_V1, UPSTREAM_V2
from reference.codec.streaming import agreement, decoder_context_frames

pytestmark = pytest.mark.cpu
HOP = 960
BOUND = {"min_snr_db": 100.0, "max_abs_err": 1.0e-5}  # conformance/cases/codec/streaming.yaml


@pytest.fixture(autouse=True)
def _single_thread():
    with one_torch_thread():
        yield


def codes_of(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 1024, (8, frames), generator=torch.Generator().manual_seed(seed))  # [8, T]


def decode_in_pushes(pool: StatePool, codes: torch.Tensor, pushes: list[int]) -> torch.Tensor:
    stream, t = CarriedStream(pool), 0
    for i, n in enumerate(pushes):
        advance([stream], codes[None, :, t : t + n], last=i == len(pushes) - 1)
        t += n
    return stream.take(0, codes.shape[1])


def test_the_lag_is_the_decoders_right_reach():
    decoder = CarriedDecoder(fixture_codec())
    assert decoder.lag_frames == decoder_context_frames(fixture_codec().cfg)[1] == 10
    assert 9 * HOP < decoder.lag <= 10 * HOP  # the sum of the layers' paddings, in output samples


@pytest.mark.parametrize("pushes", [[1] * 40, [40], [18, 8, 14], [3, 0, 37]], ids=["ones", "whole", "chunks", "empty"])
def test_any_pushes_give_the_offline_decode(pushes):
    codes = codes_of(40, 1)
    pcm = decode_in_pushes(StatePool(CarriedDecoder(fixture_codec()), 1), codes, pushes)
    measured = agreement(pcm, fixture_codec().decode(codes))
    assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], measured


def test_a_batch_of_streams_equals_each_stream_alone():
    pool = StatePool(CarriedDecoder(fixture_codec()), 2)  # 2 slots and slot 0; the third stream doubles it
    clips = [codes_of(30, seed) for seed in range(3)]
    streams = [CarriedStream(pool) for _ in clips]
    for t in range(0, 30, 10):
        advance(streams, torch.stack([c[:, t : t + 10] for c in clips]), last=t == 20)
    assert pool.in_use == 0 and (pool.capacity, pool.generation) == (6, 2)
    for stream, codes in zip(streams, clips):
        measured = agreement(stream.take(0, 30), fixture_codec().decode(codes))
        assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], measured


def test_a_slot_handed_out_again_starts_from_zeros():
    pool = StatePool(CarriedDecoder(fixture_codec()), 1)
    first = CarriedStream(pool)
    advance([first], codes_of(15, 2)[None], last=False)  # leaves its state in slot 0
    first.release()
    first.release()  # idempotent
    codes = codes_of(20, 3)
    measured = agreement(decode_in_pushes(pool, codes, [12, 8]), fixture_codec().decode(codes))
    assert measured.snr_db >= BOUND["min_snr_db"], measured
    with pytest.raises(ValueError, match="slot 1 is not in use"):
        pool.release(1)
    with pytest.raises(ValueError, match="slot 0 is not in use"):
        pool.release(0)  # nobody's: a CUDA graph's padding rows use it


def test_a_chunk_without_its_look_ahead_is_refused_not_guessed():
    stream = CarriedStream(StatePool(CarriedDecoder(fixture_codec()), 1))
    advance([stream], codes_of(12)[None], last=False)  # samples up to 12 * 960 - lag
    assert len(stream.take(0, 2)) == 2 * HOP
    with pytest.raises(RuntimeError, match="more look-ahead is needed"):
        stream.take(2, 1)
    with pytest.raises(RuntimeError, match="not decoded"):
        stream.take(0, 1)  # dropped once taken


@pytest.mark.parametrize("geometry", [UPSTREAM_V1, UPSTREAM_V2])
def test_geometries_short_of_the_reach_are_refused_with_the_reach_named(geometry):
    with pytest.raises(ValueError, match=r"do not cover the decoder's reach \(10 and 10 frames\).*windowed decode"):
        CarriedStreamingDecoder(fixture_codec(), geometry)
    assert CarriedDecoder(fixture_codec()).refusal(DEFAULT_GEOMETRY) is None


def test_each_frame_is_decoded_once():
    """The decoder's first layer sees each frame once (plus its own state), where the windowed
    decode of DEFAULT_GEOMETRY feeds it left context and holdback again with every chunk."""
    decoder, seen = CarriedDecoder(fixture_codec()), []
    stream_decoder = CarriedStreamingDecoder(fixture_codec(), DEFAULT_GEOMETRY, StatePool(decoder, 1))
    real = decoder.step
    decoder.step = lambda hidden, *rest: seen.append(hidden.shape[2]) or real(hidden, *rest)
    codes = codes_of(70, 4)
    for t in range(70):
        stream_decoder.push(codes[:, t : t + 1])
    stream_decoder.finish()
    assert seen == [18, 8, 16, 25, 3 + decoder.lag_frames]  # 70 frames, then the zero frames that end it
