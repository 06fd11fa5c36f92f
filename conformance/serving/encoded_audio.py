"""Judging a compressed answer (mp3, opus, aac, flac) against the PCM answer of the same request,
through a decoder that is not the encoder that made it:

- libsndfile (soundfile) for mp3 (mpg123), opus (libopus) and a whole flac;
- FFmpeg's own decoders (PyAV) for aac (libsndfile reads no AAC) and a streamed flac (its
  STREAMINFO has no length, which libsndfile's reader cannot take).

Checks, with the case's `formats` entry of conformance/cases/serving/server.yaml:
- the decoded rate is 24 kHz, mono;
- flac: the samples are the PCM's, exactly;
- the lossy ones: the decoded audio starts at most `max_priming` samples late (the encoder's own
  priming: found by the best correlation over lags up to MAX_LAG), holds every PCM sample after it
  and at most `max_padding` more (no audio lost at either end, no silence beyond the codec's
  frame), and its log-mel spectrogram is within `max_mel_db` (mean absolute difference, dB, bins
  under the PCM's loudest - 60 dB counted at that floor) of the PCM's over the whole answer and
  within `max_tail_mel_db` over its last 0.4 s.

The log-mel is librosa's `melspectrogram` with its defaults (periodic Hann, zero-padded centred
frames, power 2, Slaney mel scale and area norm, fmin 0) computed by transformers' numpy
`spectrogram` and `mel_filter_bank` (10 ms for 4 s of audio): librosa's numba code compiles on
first use in each process, 13-20 s on the CPU machine. tests/test_encoded_audio_mel.py holds the two
within 1e-4 dB.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import av
import numpy as np
import soundfile
from transformers.audio_utils import mel_filter_bank, spectrogram, window_function

RATE = 24000
MAX_LAG = 4096
TAIL_FRAMES = 40  # 0.4 s of 10 ms mel frames


@dataclass(frozen=True)
class Measured:
    rate: int
    lag: int  # samples of priming before the audio
    extra: int  # samples after the audio (negative: audio missing)
    mel_db: float
    tail_mel_db: float

    def __str__(self) -> str:
        return (f"{self.rate} Hz, priming {self.lag}, {self.extra:+d} samples at the end, log-mel {self.mel_db:.2f} dB "
                f"(last 0.4 s {self.tail_mel_db:.2f})")


def decode(fmt: str, data: bytes, streamed: bool) -> tuple[np.ndarray, int]:
    """(mono float samples, rate) by a decoder other than the encoder."""
    if fmt in ("mp3", "opus") or (fmt == "flac" and not streamed):
        samples, rate = soundfile.read(io.BytesIO(data), dtype="float32")
        return samples.reshape(len(samples), -1)[:, 0] if samples.ndim > 1 else samples, rate
    with av.open(io.BytesIO(data)) as container:
        parts, rate = [], None
        for frame in container.decode(audio=0):
            assert frame.layout.nb_channels == 1, f"{fmt}: {frame.layout.nb_channels} channels"
            array, rate = frame.to_ndarray(), frame.sample_rate
            scale = 32768.0 if array.dtype == np.int16 else 1.0
            parts.append(array.reshape(-1).astype(np.float32) / scale)
    return (np.concatenate(parts) if parts else np.zeros(0, np.float32)), rate


FLOOR_DB = 60.0  # mel bins this far below the reference's loudest count at that floor (inaudible beside it)
N_FFT, HOP = 960, 240  # 40 ms windows every 10 ms
WINDOW = window_function(N_FFT, "hann")
MEL_FILTERS = mel_filter_bank(num_frequency_bins=N_FFT // 2 + 1, num_mel_filters=64, min_frequency=0.0,
                              max_frequency=8000.0, sampling_rate=RATE, norm="slaney", mel_scale="slaney")


def _log_mel(samples: np.ndarray) -> np.ndarray:
    mel = spectrogram(samples, WINDOW, frame_length=N_FFT, hop_length=HOP, power=2.0, center=True,
                      pad_mode="constant", mel_filters=MEL_FILTERS, mel_floor=0.0)
    return 10.0 * np.log10(mel + 1e-12)  # [64, frames]


def _mel_difference(aligned: np.ndarray, reference: np.ndarray) -> np.ndarray:
    ours, theirs = _log_mel(reference), _log_mel(aligned)
    floor = ours.max() - FLOOR_DB
    return np.abs(np.maximum(theirs, floor) - np.maximum(ours, floor))


def measure(fmt: str, data: bytes, pcm: bytes, streamed: bool) -> Measured:
    decoded, rate = decode(fmt, data, streamed)
    reference = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    n = min(len(reference), max(0, len(decoded) - MAX_LAG), RATE)
    lag = max(range(MAX_LAG + 1), key=lambda k: float(np.dot(decoded[k : k + n], reference[:n]))) if n else 0
    aligned = decoded[lag : lag + len(reference)]
    aligned = np.pad(aligned, (0, len(reference) - len(aligned)))  # missing audio scores as silence
    difference = _mel_difference(aligned, reference)
    return Measured(rate, lag, len(decoded) - lag - len(reference), float(difference.mean()),
                    float(difference[:, -TAIL_FRAMES:].mean()))


def judge(fmt: str, data: bytes, pcm: bytes, streamed: bool, bound: dict) -> Measured:
    """Asserts the answer decodes to the PCM within `bound`; returns what was measured."""
    decoded, rate = decode(fmt, data, streamed)
    assert rate == RATE, f"{fmt}: decoded at {rate} Hz, the audio is {RATE}"
    if bound.get("exact"):
        expected = np.frombuffer(pcm, dtype="<i2").astype(np.int32)
        got = np.round(decoded * 32768.0).astype(np.int32)
        assert len(got) == len(expected), f"{fmt}: {len(got)} samples decoded, {len(expected)} sent"
        steps = np.abs(got - expected)
        assert not steps.any(), (
            f"{fmt}: {np.count_nonzero(steps)} of {len(got)} samples differ, by up to {steps.max()} steps of 16 bits")
        return Measured(rate, 0, 0, 0.0, 0.0)
    measured = measure(fmt, data, pcm, streamed)
    assert measured.lag <= bound["max_priming"], f"{fmt}: {measured} (priming bound {bound['max_priming']})"
    assert 0 <= measured.extra <= bound["max_padding"], f"{fmt}: {measured} (padding bound {bound['max_padding']})"
    assert measured.mel_db <= bound["max_mel_db"] and measured.tail_mel_db <= bound["max_tail_mel_db"], (
        f"{fmt}: {measured} (bound {bound['max_mel_db']} dB, last 0.4 s {bound['max_tail_mel_db']} dB)")
    return measured
