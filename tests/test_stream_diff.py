"""The soak's mismatch report (conformance/serving/stream_diff.py) on synthetic 16-bit PCM: a greedy code
flip (a clean prefix, then unrelated audio) and codec rounding (a few LSB spread from the start,
equal length) must be told apart, with the first differing sample, its time and codec row, and
the SNR before and after that row."""

import json
import math

import numpy as np
import pytest

from conformance.serving.stream_diff import LSB_TOLERANCE, ROW_SAMPLES, compare

ROWS = 40


def _speech_like(seed: int, rows: int = ROWS) -> np.ndarray:
    """A loud random signal (int16 values, about -18 dBFS), the stand-in for decoded speech."""
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.normal(0.0, 4000.0, rows * ROW_SAMPLES)), -32768, 32767).astype(np.int16)


def _pcm(samples: np.ndarray) -> bytes:
    return samples.astype("<i2").tobytes()


def _rounding_noise(n: int, most: int, seed: int) -> np.ndarray:
    """Differences of at most `most` LSB at random places from the first samples on."""
    rng = np.random.default_rng(seed)
    noise = rng.integers(-most, most + 1, n)
    noise[rng.random(n) < 0.7] = 0  # most samples equal, as when a batch moves a few by a step
    noise[3] = most  # one right at the start: rounding is spread from the start
    return noise


def test_equal_streams():
    base = _speech_like(0)
    d = compare(_pcm(base), _pcm(base))
    assert d.cause == "equal" and d.first_sample is None and d.first_row is None and d.max_lsb == 0
    assert d.snr_db == math.inf and d.samples == d.samples_alone == ROWS * ROW_SAMPLES


def test_rounding_within_a_few_lsb_has_no_first_row():
    base = _speech_like(1)
    other = base.astype(np.int32) + _rounding_noise(base.size, LSB_TOLERANCE, seed=2)
    d = compare(_pcm(other), _pcm(base))
    assert d.cause == "rounding" and d.first_sample is None and d.snr_after_db is None
    assert d.max_lsb == LSB_TOLERANCE and 60.0 < d.snr_db < math.inf


def test_rounding_beyond_a_few_lsb_is_spread_and_keeps_a_high_snr():
    base = _speech_like(3)
    other = base.astype(np.int32) + _rounding_noise(base.size, 10, seed=4)  # 1-10 LSB: the H200's batches
    d = compare(_pcm(other), _pcm(base))
    assert d.cause == "rounding"
    assert d.first_row == 0 and d.first_sample < ROW_SAMPLES  # from the start
    assert d.snr_before_db is None and d.snr_after_db > 50.0 and d.max_lsb == 10


def test_code_flip_is_a_clean_prefix_then_unrelated_audio():
    base = _speech_like(5)
    flip = 12 * ROW_SAMPLES + 100  # the first sample of the frame the other code changed, decoded
    other = base.astype(np.int32) + _rounding_noise(base.size, 1, seed=6)  # rounding before the flip
    other[flip:] = _speech_like(7)[flip:]
    other[flip] = base[flip] + 5000  # so the first large difference is exactly at `flip`
    d = compare(_pcm(other), _pcm(base))
    assert d.cause == "code flip"
    assert (d.first_sample, d.first_row) == (flip, 12) and d.first_time_s == pytest.approx(flip / 24000)
    assert d.snr_before_db > 60.0
    assert d.snr_after_db == pytest.approx(-3.0, abs=0.3)  # two unrelated signals of one power: noise = 2x signal
    assert d.snr_after_db < d.snr_db < 0.0  # the clean prefix lifts the whole a little


def test_code_flip_that_moves_the_end_reports_both_lengths():
    base = _speech_like(8)
    flip = 30 * ROW_SAMPLES
    other = np.concatenate([base[:flip], _speech_like(9, rows=15)])  # the end token came 5 rows later
    d = compare(_pcm(other), _pcm(base))
    assert (d.samples, d.samples_alone) == (45 * ROW_SAMPLES, ROWS * ROW_SAMPLES)
    assert d.cause == "code flip" and d.first_row == 30 and d.snr_before_db == math.inf


def test_a_stream_cut_short_is_a_length_mismatch():
    base = _speech_like(10)
    d = compare(_pcm(base[: 25 * ROW_SAMPLES]), _pcm(base))
    assert d.cause == "length" and d.first_sample is None
    assert (d.samples, d.samples_alone) == (25 * ROW_SAMPLES, ROWS * ROW_SAMPLES)


def test_summary_is_json_with_the_figures_and_cause():
    base = _speech_like(11)
    other = base.copy()
    other[5000:] = 0  # silence after a point: a divergence the SNR after shows as 0 dB
    summary = compare(_pcm(other), _pcm(base)).summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["first_row"] == 5 and summary["first_time_s"] == round(summary["first_sample"] / 24000, 3)
    assert summary["snr_before_db"] == "inf" and summary["snr_after_db"] == 0.0 and summary["cause"] == "code flip"
