"""The codec decoded chunk by chunk, each frame once: every layer of the DAC decoder carries the
left context it needs from one chunk to the next (its state), so a chunk costs its new frames only
(a windowed decode, reference/codec/streaming.py, decodes left context and look-ahead again).

Per layer, for n new input samples:
- a same-length conv (kernel K, dilation d, padding p = d (K - 1) / 2) keeps its last 2p inputs and
  emits n samples, p behind its input;
- the transposed conv (stride s, kernel 2s, padding ceil(s/2)) keeps its last input and emits s n
  samples, ceil(s/2) behind;
- a residual unit keeps its last 2p inputs (p = its conv's padding): its branch sees them, and
  they are the input it adds back p samples late, as the branch's output is.
So the decoder's output runs `lag` samples behind the frames pushed (`lag_frames` = ceil(lag / 960)
frames of look-ahead give a chunk all its samples). Offline, every layer pads its input with zeros
at both ends; here every state starts as zeros (the padding in front), each layer's samples before
the stream's start are set to zero, and a stream ends with `lag_frames` zero frames pushed after its
last one, each layer's samples past the end set to zero. The stream is then the offline decode up to
float rounding, however it is chunked (conformance/codec/test_stream_vs_offline.py runs it on every
geometry of conformance/cases/codec/streaming.yaml).

States live in a `StatePool`, one slot per stream; `advance` decodes a batch of streams, each with
the same number of new frames, gathering their slots and writing them back (from a CUDA graph where
reference/codec/carried_graphs.py holds one); each stream keeps the PCM made until its chunk is taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from reference.codec.geometry import StreamGeometry
from reference.codec.model import Codec
from reference.codec.streaming import ChunkCutter, Window, decoder_context_frames


@dataclass(frozen=True)
class _Conv:
    """A same-length conv; state: its last 2 * pad inputs."""

    weight: torch.Tensor  # [C_out, C_in, K]
    bias: torch.Tensor  # [C_out]
    dilation: int

    @property
    def pad(self) -> int:
        return self.dilation * (self.weight.shape[2] - 1) // 2

    def __call__(self, buffer: torch.Tensor) -> torch.Tensor:  # [B, C_in, 2 pad + n] -> [B, C_out, n]
        return F.conv1d(buffer, self.weight, self.bias, dilation=self.dilation)


@dataclass(frozen=True)
class _Upsample:
    """The transposed conv of a decoder block; state: its last input."""

    weight: torch.Tensor  # [C_in, C_out, 2 * stride]
    bias: torch.Tensor  # [C_out]
    stride: int

    def __call__(self, buffer: torch.Tensor) -> torch.Tensor:  # [B, C_in, 1 + n] -> [B, C_out, stride * n]
        out = F.conv_transpose1d(buffer, self.weight, self.bias, stride=self.stride)  # [B, C_out, s (n + 2)]
        return out[:, :, self.stride : -self.stride]  # the samples the state's input and the new ones complete


@dataclass(frozen=True)
class _Residual:
    """x + conv2(snake2(conv1(snake1(x)))), the sum p samples behind x; state: its last 2p inputs."""

    snake1: nn.Module
    conv1: _Conv
    snake2: nn.Module
    conv2: _Conv  # kernel 1

    def __call__(self, buffer: torch.Tensor) -> torch.Tensor:  # [B, C, 2 pad + n] -> [B, C, n]
        p, n = self.conv1.pad, buffer.shape[2] - 2 * self.conv1.pad
        return buffer[:, :, p : p + n] + self.conv2(self.snake2(self.conv1(self.snake1(buffer))))


@dataclass(frozen=True)
class _Layer:
    """One stateful layer, and where its output samples sit: output i of a step that starts at frame
    f lies at position f * scale - lag + i of its level (scale samples a frame)."""

    op: _Conv | _Upsample | _Residual
    state_len: int
    channels: int  # of its input, as its state holds it
    scale: int
    lag: int


def _conv(module: nn.Conv1d) -> _Conv:
    if module.padding[0] != module.dilation[0] * (module.kernel_size[0] - 1) // 2 or module.stride[0] != 1:
        raise ValueError(f"carried decode: {module} is not a same-length conv")
    return _Conv(module.weight.detach(), module.bias.detach(), module.dilation[0])  # weight norm: computed once here


def _upsample(module: nn.ConvTranspose1d) -> _Upsample:
    s = module.stride[0]
    if module.kernel_size[0] != 2 * s or module.padding[0] != math.ceil(s / 2) or module.output_padding[0] != s % 2:
        raise ValueError(f"carried decode: {module} is not the DAC block's transposed conv (kernel 2s, "
                         "padding ceil(s/2), output_padding s % 2)")
    return _Upsample(module.weight.detach(), module.bias.detach(), s)


class CarriedDecoder:
    """The codec's decode split into stateful layers (weights read once, weight norm applied)."""

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        dac = codec.acoustic_decoder
        layers: list[_Layer] = []
        scale, lag = 1, 0

        def add(op, channels: int, state_len: int, new_scale: int, added_lag: int) -> None:
            nonlocal scale, lag
            scale, lag = new_scale, lag * (new_scale // scale) + added_lag
            layers.append(_Layer(op, state_len, channels, scale, lag))

        first = _conv(dac.conv1)
        add(first, first.weight.shape[1], 2 * first.pad, 1, first.pad)
        for block in dac.block:
            up = _upsample(block.conv_t1)
            add((block.snake1, up), up.weight.shape[0], 1, scale * up.stride, math.ceil(up.stride / 2))
            for unit in (block.res_unit1, block.res_unit2, block.res_unit3):
                res = _Residual(unit.snake1, _conv(unit.conv1), unit.snake2, _conv(unit.conv2))
                add(res, res.conv1.weight.shape[1], 2 * res.conv1.pad, scale, res.conv1.pad)
        last = _conv(dac.conv2)
        add((dac.snake1, last), last.weight.shape[1], 2 * last.pad, scale, last.pad)
        if scale != codec.hop_length:
            raise ValueError(f"carried decode: the decoder upsamples {scale}x, the codec's hop is {codec.hop_length}")
        self.layers = layers
        self.tanh = dac.tanh  # nn.Identity in the Higgs codec (reference/codec/model.py)
        self.lag = lag  # output samples behind the frames pushed
        self.lag_frames = math.ceil(lag / scale)  # zero frames that end a stream; look-ahead a chunk needs

    def refusal(self, geometry: StreamGeometry) -> str | None:
        """None where windows of this geometry decode to the offline decode (context and look-ahead
        cover the decoder's reach): carrying the state then gives the same stream, each frame once.
        Else why not: a geometry short of the reach asks for its windows' edges, which only a
        windowed decode (reference/codec/streaming.py) gives."""
        left, right = decoder_context_frames(self.codec.cfg)
        right = max(right, self.lag_frames)
        if geometry.left_context_frames >= left and geometry.right_holdback_frames >= right:
            return None
        return (f"left context {geometry.left_context_frames} and holdback {geometry.right_holdback_frames} frames "
                f"do not cover the decoder's reach ({left} and {right} frames): its windows' edges differ from "
                "the offline decode, and only a windowed decode gives them")

    @torch.no_grad()
    def step(self, hidden: torch.Tensor, states: list[torch.Tensor], starts: torch.Tensor,
             ends: torch.Tensor) -> torch.Tensor:
        """hidden [B, 256, n]: each stream's next n decoder-input frames (fc2's output; zeros past a
        stream's end); states: per layer [B, C, state_len], updated in place; starts [B]: frames each
        stream pushed before; ends [B]: each stream's frame count (NO_END before it is known); both
        on hidden's device. -> PCM [B, n * 960], the samples from starts * 960 - lag on. Row by row,
        and nothing waits for the device: a CUDA graph can hold it (reference/codec/carried_graphs.py)."""
        x = hidden
        for layer, state in zip(self.layers, states):
            buffer = torch.cat([state, x], dim=2)  # [B, C, state_len + new]
            state.copy_(buffer[:, :, buffer.shape[2] - layer.state_len :])
            op = layer.op
            if isinstance(op, tuple):  # an elementwise snake first
                snake, op = op
                buffer = snake(buffer)
            x = op(buffer)
            # The samples before each stream's start and past its end are zeros (offline: padding).
            positions = torch.arange(x.shape[2], device=x.device) + (starts * layer.scale - layer.lag)[:, None]
            x = x * ((positions >= 0) & (positions < ends[:, None] * layer.scale)).unsqueeze(1).to(x.dtype)
        return self.tanh(x)[:, 0]


NO_END = 1 << 40  # a stream's end before it is known, in frames


class StatePool:
    """The carried states of many streams: per layer a [slots, C, state_len] tensor on the codec's
    device; a stream holds one slot from its first step until it is released. A slot handed out
    again starts from zeros: no stream sees another's state. Slot 0 is nobody's: the rows a CUDA
    graph pads its batch with read and write it. Growing moves every state (`generation` counts
    the moves: a graph captured before one no longer holds the states)."""

    def __init__(self, decoder: CarriedDecoder, slots: int = 8) -> None:
        self.decoder = decoder
        self._pool: list[torch.Tensor] = []
        self._free: list[int] = []
        self.capacity = 1  # slot 0
        self.generation = 0
        self._grow(slots + 1)

    def _grow(self, slots: int) -> None:
        p = self.decoder.codec.codebooks
        grown = [torch.zeros(slots, layer.channels, layer.state_len, dtype=p.dtype, device=p.device)
                 for layer in self.decoder.layers]
        for new, old in zip(grown, self._pool):
            new[: self.capacity].copy_(old)
        self._pool = grown
        self._free += range(self.capacity, slots)
        self.capacity = slots
        self.generation += 1

    @property
    def in_use(self) -> int:
        return self.capacity - 1 - len(self._free)

    def acquire(self) -> int:
        if not self._free:
            self._grow(2 * self.capacity)
        slot = min(self._free)
        self._free.remove(slot)
        for pool in self._pool:
            pool[slot].zero_()
        return slot

    def release(self, slot: int) -> None:
        if slot in self._free or not 0 < slot < self.capacity:
            raise ValueError(f"StatePool.release: slot {slot} is not in use")
        self._free.append(slot)

    def step(self, hidden: torch.Tensor, slots: torch.Tensor, starts: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
        """CarriedDecoder.step on the streams holding `slots` [B] (a device tensor), their states
        read and written back."""
        states = [pool.index_select(0, slots) for pool in self._pool]  # [B, C, state_len] each
        tf32 = self.decoder.codec.tf32  # as Codec.decode_checked
        with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=tf32):
            pcm = self.decoder.step(hidden, states, starts, ends)
        for pool, state in zip(self._pool, states):
            pool.index_copy_(0, slots, state)
        return pcm

    def step_codes(self, codes: torch.Tensor, slots: torch.Tensor, starts: torch.Tensor,
                   ends: torch.Tensor) -> torch.Tensor:
        """`step` from real codes [B, 8, n] (the RVQ and fc2 first): what a CUDA graph captures."""
        return self.step(self.decoder.codec.quantized(codes), slots, starts, ends)


class CarriedStream:
    """One stream's place in a StatePool: the frames it pushed, the PCM made and not yet taken.
    It holds a slot from its first `advance` until its end or `release()`."""

    def __init__(self, pool: StatePool) -> None:
        self.pool = pool
        self.slot: int | None = None
        self.pushed = 0  # frames decoded so far
        self.ended = False
        self._pcm: torch.Tensor | None = None  # [samples] made, from sample `_pcm_from` on
        self._pcm_from = 0

    def release(self) -> None:
        """Gives the slot back (at the end, or when the stream is dropped); idempotent."""
        if self.slot is not None:
            self.pool.release(self.slot)
            self.slot = None

    def take(self, first_frame: int, frames: int) -> torch.Tensor:
        """PCM [frames * 960] of frames first_frame .. first_frame + frames (made by earlier
        `advance` calls); what lies before them is dropped."""
        hop = self.pool.decoder.codec.hop_length
        start, stop = first_frame * hop - self._pcm_from, (first_frame + frames) * hop - self._pcm_from
        made = 0 if self._pcm is None else len(self._pcm)
        if start < 0 or stop > made:
            raise RuntimeError(f"CarriedStream.take: frames {first_frame}..{first_frame + frames} are not decoded "
                               f"(samples {self._pcm_from}..{self._pcm_from + made} are): more look-ahead is needed")
        chunk = self._pcm[start:stop].clone()
        self._pcm, self._pcm_from = self._pcm[stop:], self._pcm_from + stop
        return chunk

    def _append(self, pcm: torch.Tensor, first_sample: int, end_sample: int | None) -> None:
        """pcm [samples] from `first_sample` on: the samples before the start and past the end go."""
        skip = max(0, -first_sample)
        pcm = pcm[skip:] if end_sample is None else pcm[skip : max(skip, end_sample - first_sample)]
        if self._pcm is None:
            self._pcm, self._pcm_from = pcm, first_sample + skip
        else:
            self._pcm = torch.cat([self._pcm, pcm])


def advance(streams: list[CarriedStream], codes: torch.Tensor, last: bool, graphs=None) -> None:
    """Decodes each stream's next frames, codes [B, 8, n] (real, checked), as one batch; with
    `last`, each stream ends after them. Streams without a slot take one. `graphs`
    (reference/codec/carried_graphs.py) replays the batch where one of its graphs holds it."""
    pool = streams[0].pool
    decoder, codec = pool.decoder, pool.decoder.codec
    device, n = codec.codebooks.device, codes.shape[2]
    if any(s.ended for s in streams):
        raise RuntimeError("carried decode: frames pushed after a stream's end")
    if n == 0 and not last:
        return  # nothing new
    for s in streams:
        if s.slot is None:
            s.slot = pool.acquire()
    rows = torch.tensor([[s.slot for s in streams], [s.pushed for s in streams],
                         [s.pushed + n if last else NO_END for s in streams]])  # [3, B]
    if device.type == "cuda":
        rows = rows.pin_memory()  # copied beside the device's work, not after it
    slots, starts, ends = rows.to(device, non_blocking=True)
    codes = codes.to(device=device, dtype=torch.long)
    pcm = None if graphs is None or last else graphs(codes, slots, starts, ends)
    if pcm is not None:
        pcm = pcm.clone()  # the graph's output is overwritten by its next replay
    elif last:  # zero frames past the end bring out the last `lag` samples
        hidden = codec.quantized(codes) if n else codec.codebooks.new_zeros(len(streams), codec.cfg.acoustic_hidden_size, 0)
        pcm = pool.step(F.pad(hidden, (0, decoder.lag_frames)), slots, starts, ends)
    else:
        pcm = pool.step_codes(codes, slots, starts, ends)  # [B, samples]
    hop = codec.hop_length
    for s, row in zip(streams, pcm):
        s._append(row, s.pushed * hop - decoder.lag, (s.pushed + n) * hop if last else None)
        s.pushed += n
        if last:
            s.ended = True
            s.release()


@dataclass(frozen=True)
class Cut:
    """A chunk cut for a carried stream: its window, where the window starts in the stream, and
    whether the stream ends with it."""

    window: Window
    first: int  # the stream's frame at window.codes[:, 0]
    last: bool  # the stream's last frame is the window's last

    @classmethod
    def of(cls, cutter: ChunkCutter) -> Cut:
        """The next chunk of a cutter that is ready()."""
        emitted = cutter.emitted
        window = cutter.cut()
        first = emitted - window.emit_from
        return cls(window, first, cutter.ended and first + window.codes.shape[1] == cutter.received)

    def new_frames(self, stream: CarriedStream) -> int:
        """The window's frames the stream has not decoded yet."""
        return self.first + self.window.codes.shape[1] - stream.pushed

    def new_codes(self, stream: CarriedStream) -> torch.Tensor:
        return self.window.codes[:, stream.pushed - self.first :]  # [8, new_frames]

    def ends(self, stream: CarriedStream) -> bool:
        """Whether decoding it ends the stream (not already ended)."""
        return self.last and not stream.ended

    def take(self, stream: CarriedStream) -> torch.Tensor:
        return stream.take(self.first + self.window.emit_from, self.window.emit_frames)


class CarriedStreamingDecoder:
    """StreamingDecoder's interface (reference/codec/streaming.py), each frame decoded once: feed
    real frames with `push`, end with `finish`; both return the PCM chunks now ready."""

    def __init__(self, codec: Codec, geometry: StreamGeometry, pool: StatePool | None = None) -> None:
        self.pool = pool or StatePool(CarriedDecoder(codec), slots=1)
        if (why := self.pool.decoder.refusal(geometry)) is not None:
            raise ValueError(f"carried decode of {geometry}: {why}")
        self.codec = codec
        self.cutter = ChunkCutter(geometry, codec.cfg.num_codebooks)
        self.stream = CarriedStream(self.pool)

    def _decode(self) -> list[torch.Tensor]:
        chunks = []
        while self.cutter.ready():
            cut = Cut.of(self.cutter)
            if cut.new_frames(self.stream) or cut.ends(self.stream):
                advance([self.stream], cut.new_codes(self.stream)[None], cut.ends(self.stream))
            chunks.append(cut.take(self.stream))
        return chunks

    def push(self, frames: torch.Tensor) -> list[torch.Tensor]:
        """frames LongTensor [8, n] (reverted, real) -> the chunks that became ready."""
        self.codec.check_codes(frames)
        self.cutter.add(frames)
        return self._decode()

    def finish(self) -> list[torch.Tensor]:
        """Ends the stream: every frame not yet emitted, in chunks of the usual sizes."""
        self.cutter.end()
        return self._decode()


def stitched_carried(codec: Codec, codes: torch.Tensor, geometry: StreamGeometry) -> torch.Tensor:
    """codes [8, T] pushed one frame at a time into a CarriedStreamingDecoder, then finished -> the
    concatenated stream [T * 960] (reference/codec/streaming.py's stitched_stream, carried)."""
    decoder = CarriedStreamingDecoder(codec, geometry)
    chunks = [c for t in range(codes.shape[1]) for c in decoder.push(codes[:, t : t + 1])] + decoder.finish()
    return torch.cat(chunks) if chunks else codec.decode(codes)
