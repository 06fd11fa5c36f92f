"""Streaming code2wav: real codec frames arrive a few at a time; PCM leaves in chunks.

Chunking (a `StreamGeometry`): the first chunk emits `first_chunk_frames`, every later one
`chunk_frames` (with `growing_chunks`, as many as were emitted before it, up to `chunk_frames`).
A chunk's decode window is up to `left_context_frames` already-emitted frames, the
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


@dataclass(frozen=True)
class Window:
    """One chunk's decode window: the frames to decode, and which of them the chunk emits."""

    codes: torch.Tensor  # [8, n] left context + the chunk's frames + look-ahead
    emit_from: int  # frames of left context in front of the chunk
    emit_frames: int  # the chunk's frames

    def trim(self, pcm: torch.Tensor, hop: int) -> torch.Tensor:
        """The window's PCM [n * hop] -> the chunk's [emit_frames * hop]."""
        return pcm[self.emit_from * hop : (self.emit_from + self.emit_frames) * hop]


class ChunkCutter:
    """Where the chunks of one stream fall: frames in with `add`, windows out with `cut` while
    `ready()`; after `end()` the rest is ready in chunks of the usual sizes. Decodes nothing, so a
    decoder can take its windows alone (StreamingDecoder) or batched (reference/codec/stage.py)."""

    def __init__(self, geometry: StreamGeometry, num_codebooks: int) -> None:
        self.geometry = geometry
        self._frames = torch.zeros(num_codebooks, 0, dtype=torch.long)
        self._added: list[torch.Tensor] = []  # pieces not yet joined to _frames: joined once a cut
        self.received = 0  # frames added
        self.emitted = 0  # frames already cut into chunks
        self.ended = False

    @property
    def frames(self) -> torch.Tensor:
        """Every frame added. [8, received]"""
        if self._added:
            self._frames = torch.cat([self._frames, *self._added], dim=1)
            self._added = []
        return self._frames

    def _next_size(self) -> int:
        return self.geometry.chunk_size(self.emitted)

    def add(self, frames: torch.Tensor) -> None:
        """frames LongTensor [8, n] (reverted, real)."""
        if self.ended:
            raise RuntimeError("frames pushed after finish(): start a new decoder or stage stream per stream")
        if frames.dtype != torch.long or frames.device.type != "cpu":
            frames = frames.to("cpu", torch.long)
        self._added.append(frames)
        self.received += frames.shape[1]

    def end(self) -> None:
        if self.ended:
            raise RuntimeError("finish() called twice on one stream")
        self.ended = True

    def ready(self) -> bool:
        """A chunk can be cut: its frames and full look-ahead arrived (after end(): any frame left)."""
        left = self.received - self.emitted
        return left > 0 if self.ended else left >= self._next_size() + self.geometry.right_holdback_frames

    def cut(self) -> Window:
        if not self.ready():
            raise RuntimeError("ChunkCutter.cut: no chunk is ready (check ready() first)")
        g = self.geometry
        size = min(self._next_size(), self.received - self.emitted)
        end = self.emitted + size
        start = max(0, self.emitted - g.left_context_frames)
        stop = min(self.received, end + g.right_holdback_frames)
        window = Window(self.frames[:, start:stop], self.emitted - start, size)
        self.emitted = end
        return window

    def windows(self) -> list[Window]:
        """Every window ready now."""
        out = []
        while self.ready():
            out.append(self.cut())
        return out


class StreamingDecoder:
    """Feed real frames with `push`, end with `finish`; both return the PCM chunks now ready."""

    def __init__(self, codec: Codec, geometry: StreamGeometry) -> None:
        self.codec = codec
        self.geometry = geometry
        self.cutter = ChunkCutter(geometry, codec.cfg.num_codebooks)

    def _decode(self, windows: list[Window]) -> list[torch.Tensor]:
        return [w.trim(self.codec.decode(w.codes), self.codec.hop_length) for w in windows]  # [frames * 960] each

    def push(self, frames: torch.Tensor) -> list[torch.Tensor]:
        """frames LongTensor [8, n] (reverted, real) -> the chunks that became ready."""
        if self.cutter.ended:
            raise RuntimeError("StreamingDecoder.push after finish(): start a new decoder per stream")
        self.codec.check_codes(frames)
        self.cutter.add(frames)
        return self._decode(self.cutter.windows())

    def finish(self) -> list[torch.Tensor]:
        """Ends the stream: every frame not yet emitted, in chunks of the usual sizes."""
        self.cutter.end()
        return self._decode(self.cutter.windows())


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
    stream, offline = stream.detach().double().cpu(), offline.detach().double().cpu()  # either may be on a device
    ref, err = offline, stream - offline
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
