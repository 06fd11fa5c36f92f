"""Where a streamed answer parts from the same request alone, and what that says about the cause.

The soak (conformance/tools/serving_soak.py) compares each completed stream with the same greedy
request streamed alone. Two causes leave different marks in the 16-bit PCM:

- a greedy code flip: under another batch the talker picked another code at some row (a near tie);
  every later row follows from that one, so the audio agrees up to that row and is unrelated
  after it: a clean prefix, then a low SNR, often with another length (the end moves too);
- codec rounding: the same codes decoded in another batch shape differ by a few LSB, spread from
  the start, with the same length and a high SNR on both sides of any split.

`compare` measures what tells them apart; `Divergence.cause` reads it off. A codec row is one
frame of 960 samples (40 ms at 24 kHz): the row of the talker's first codebook at that frame.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

SAMPLE_RATE = 24000
ROW_SAMPLES = 960  # samples per codec frame
LSB_TOLERANCE = 4  # "a few" 16-bit steps: codec rounding measured 1-10 LSB apart on the H200
FLIP_SNR_DB = 20.0  # after a code flip the audio is unrelated: about 0 dB; rounding stays far above


@dataclass(frozen=True)
class Divergence:
    samples: int  # of the stream
    samples_alone: int
    first_sample: int | None  # first index where they differ by more than LSB_TOLERANCE steps
    first_row: int | None  # first_sample // ROW_SAMPLES
    snr_db: float  # over the common length
    snr_before_db: float | None  # over the rows before first_row (None: no such rows)
    snr_after_db: float | None  # from first_row to the common length (None: no divergence)
    max_lsb: int  # the largest difference, in 16-bit steps, over the common length

    @property
    def first_time_s(self) -> float | None:
        return None if self.first_sample is None else self.first_sample / SAMPLE_RATE

    @property
    def cause(self) -> str:
        """'equal'; 'rounding' (equal length, every difference within a few LSB or a high SNR after
        the first larger one); 'code flip' (a clean prefix, then unrelated audio); 'length' (equal
        up to the shorter one, which ends first: the end moved, or a stream was cut); 'other'."""
        same_length = self.samples == self.samples_alone
        if same_length and self.max_lsb == 0:
            return "equal"
        if self.first_row is None:
            return "rounding" if same_length else "length"
        clean_prefix = self.snr_before_db is None or self.snr_before_db >= self.snr_after_db + FLIP_SNR_DB
        if clean_prefix and self.snr_after_db < FLIP_SNR_DB:
            return "code flip"
        if same_length and self.snr_after_db >= FLIP_SNR_DB:
            return "rounding"
        return "other"

    def summary(self) -> dict:
        """The figures as JSON-ready values (dB rounded to 0.1, inf as the string 'inf')."""
        out = {k: (_db(v) if k.endswith("_db") else v) for k, v in asdict(self).items()}
        t = self.first_time_s
        return {**out, "first_time_s": None if t is None else round(t, 3), "cause": self.cause}


def _db(v: float | None):
    if v is None:
        return None
    return str(v) if math.isinf(v) else round(v, 1)


def snr_db(x: np.ndarray, ref: np.ndarray) -> float:
    """10 log10(|ref|^2 / |x - ref|^2) in float64; inf when equal."""
    err = x.astype(np.float64) - ref.astype(np.float64)
    noise, signal = float(np.dot(err, err)), float(np.dot(ref.astype(np.float64), ref.astype(np.float64)))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf


def compare(pcm: bytes, alone: bytes, lsb: int = LSB_TOLERANCE) -> Divergence:
    """16-bit little-endian PCM of a stream against the same request alone."""
    a, b = np.frombuffer(pcm, dtype="<i2"), np.frombuffer(alone, dtype="<i2")
    n = min(len(a), len(b))
    a, b = a[:n].astype(np.int32), b[:n].astype(np.int32)
    diff = np.abs(a - b)
    beyond = np.flatnonzero(diff > lsb)
    first = int(beyond[0]) if beyond.size else None
    row = None if first is None else first // ROW_SAMPLES
    split = None if row is None else row * ROW_SAMPLES
    return Divergence(
        samples=len(pcm) // 2, samples_alone=len(alone) // 2, first_sample=first, first_row=row,
        snr_db=snr_db(a, b),
        snr_before_db=None if not split else snr_db(a[:split], b[:split]),
        snr_after_db=None if split is None else snr_db(a[split:], b[split:]),
        max_lsb=int(diff.max()) if n else 0,
    )
