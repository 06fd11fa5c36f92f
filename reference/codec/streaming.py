"""Streaming code2wav: real codec frames arrive a few at a time; PCM leaves in chunks.

Chunking (a `StreamGeometry`): the first chunk emits `first_chunk_frames`, every later one
`chunk_frames`. A chunk's decode window is up to `left_context_frames` already-emitted frames, the
frames to emit, and up to `right_holdback_frames` look-ahead frames; the window's PCM is trimmed by
(left frames) * 960 samples at the front and (look-ahead frames) * 960 at the end. A chunk is cut
once its frames and its full look-ahead have arrived; `finish()` cuts the rest with whatever
look-ahead is left (none for the last chunk). The chunks concatenate to the stream.

The DAC decoder's receptive field is finite (`decoder_context_frames`): with left context and
look-ahead at least that wide, the stream equals the offline decode up to float rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from reference.codec.model import Codec
from reference.codec.config import CodecConfig
from reference.codec.geometry import StreamGeometry

_KERNEL = 7  # the decoder's same-length convs (first, residual, last)
_DILATIONS = (1, 3, 9)



class StreamingDecoder:
    """Feed real frames with `push`, end with `finish`; both return the PCM chunks now ready."""

    def __init__(self, codec: Codec, geometry: StreamGeometry) -> None:
        self.codec = codec
        self.geometry = geometry
        self.frames = torch.zeros(codec.cfg.num_codebooks, 0, dtype=torch.long)  # [8, received]
        self.emitted = 0  # frames already turned into PCM
        self.finished = False

    def _next_size(self) -> int:
        return self.geometry.first_chunk_frames if self.emitted == 0 else self.geometry.chunk_frames

    def _cut(self, size: int) -> torch.Tensor:
        g, hop = self.geometry, self.codec.hop_length
        end = self.emitted + size
        start = max(0, self.emitted - g.left_context_frames)
        stop = min(self.frames.shape[1], end + g.right_holdback_frames)
        pcm = self.codec.decode(self.frames[:, start:stop])  # [(stop - start) * 960]
        chunk = pcm[(self.emitted - start) * hop : (end - start) * hop]  # [size * 960]
        self.emitted = end
        return chunk

    def push(self, frames: torch.Tensor) -> list[torch.Tensor]:
        """frames LongTensor [8, n] (reverted, real) -> the chunks that became ready."""
        if self.finished:
            raise RuntimeError("StreamingDecoder.push after finish(): start a new decoder per stream")
        self.codec.check_codes(frames)
        self.frames = torch.cat([self.frames, frames.to(torch.long).cpu()], dim=1)
        chunks = []
        while self.frames.shape[1] - self.emitted >= self._next_size() + self.geometry.right_holdback_frames:
            chunks.append(self._cut(self._next_size()))
        return chunks

    def finish(self) -> list[torch.Tensor]:
        """Ends the stream: every frame not yet emitted, in chunks of the usual sizes."""
        if self.finished:
            raise RuntimeError("StreamingDecoder.finish called twice")
        self.finished = True
        chunks = []
        while self.emitted < self.frames.shape[1]:
            chunks.append(self._cut(min(self._next_size(), self.frames.shape[1] - self.emitted)))
        return chunks


def stream_chunks(
    codec: Codec, codes: torch.Tensor, geometry: StreamGeometry, frames_per_push: int = 1
) -> list[torch.Tensor]:
    """codes [8, T] pushed `frames_per_push` at a time, then finished -> the PCM chunks in order."""
    if frames_per_push < 1:
        raise ValueError(f"frames_per_push must be >= 1, got {frames_per_push}")
    decoder = StreamingDecoder(codec, geometry)
    chunks = []
    for i in range(0, codes.shape[1], frames_per_push):
        chunks += decoder.push(codes[:, i : i + frames_per_push])
    return chunks + decoder.finish()


def stitched_stream(codec: Codec, codes: torch.Tensor, geometry: StreamGeometry) -> torch.Tensor:
    """codes [8, T] -> the concatenated stream [T * 960]."""
    chunks = stream_chunks(codec, codes, geometry)
    return torch.cat(chunks) if chunks else codec.decode(codes)


@dataclass(frozen=True)
class Agreement:
    snr_db: float  # 10 log10(sum offline^2 / sum (stream - offline)^2); inf when identical
    max_abs_err: float

    def __str__(self) -> str:
        return f"SNR {self.snr_db:.1f} dB, max abs err {self.max_abs_err:.3g}"


def agreement(stream: torch.Tensor, offline: torch.Tensor) -> Agreement:
    """How closely a stitched stream [N] matches the offline decode [N] (float64 arithmetic)."""
    if stream.shape != offline.shape:
        raise ValueError(
            f"stream has {tuple(stream.shape)} samples, offline {tuple(offline.shape)}: lengths must match"
        )
    ref, err = offline.double(), stream.double() - offline.double()
    noise, signal = float(err.pow(2).sum()), float(ref.pow(2).sum())
    snr = math.inf if noise == 0.0 else 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf
    return Agreement(snr_db=snr, max_abs_err=float(err.abs().max()) if err.numel() else 0.0)


def decoder_context_frames(cfg: CodecConfig) -> tuple[int, int]:
    """(left, right): frames before and after a frame that its PCM samples depend on.

    Walks a frame's sample interval back through the decoder: a same-length conv with kernel K
    and dilation d widens it by d * (K - 1) / 2 on each side; a transposed conv (stride s, kernel
    2s, padding ceil(s/2)) maps output [a, b] to input [ceil((a + p - 2s + 1) / s), floor((b + p) / s)].
    """
    hop = cfg.hop_length
    lo, hi = 0, hop - 1  # the samples of frame 0
    lo, hi = lo - (_KERNEL - 1) // 2, hi + (_KERNEL - 1) // 2  # last conv
    for stride in reversed(cfg.upsampling_ratios):
        reach = sum(d * (_KERNEL - 1) // 2 for d in _DILATIONS)  # three residual units
        lo, hi = lo - reach, hi + reach
        pad = math.ceil(stride / 2)
        lo, hi = -((-(lo + pad - 2 * stride + 1)) // stride), (hi + pad) // stride
    lo, hi = lo - (_KERNEL - 1) // 2, hi + (_KERNEL - 1) // 2  # first conv
    return -lo, hi
