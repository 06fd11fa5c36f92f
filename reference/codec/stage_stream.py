"""One stream's side of the code2wav stage (reference/codec/stage.py): its producer pushes real
frames, which are cut into decode windows (ChunkCutter) and submitted to the stage, at most the
stage's `max_inflight_chunks` submitted and not yet delivered; its consumer takes the PCM chunks
in order. close() drops what is pending or undelivered, so nothing reaches a closed stream."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from reference.codec.carried import CarriedStream, Cut
from reference.codec.geometry import StreamGeometry
from reference.codec.model import Codec
from reference.codec.streaming import ChunkCutter, Window

_END = object()


class StreamClosed(RuntimeError):
    """A closed stream was pushed to or read from."""


@dataclass(eq=False)
class Job:
    """A window submitted to the stage, and the future its chunk goes to."""

    stream: StageStream | None  # None: a whole decode (CodecStage.decode)
    window: Window
    future: asyncio.Future
    cut: Cut | None = None  # a carried stream's: where the window lies in the stream


@dataclass
class StageRecord:
    batches: Counter = field(default_factory=Counter)  # batch size -> decodes (bounded, unlike a log)
    replayed: int = 0  # of those decodes, the ones a CUDA graph ran (reference/codec/graphs.py)
    most_inflight: int = 0  # the most chunks one stream had submitted and not yet delivered
    dropped: int = 0  # chunks of closed streams, never delivered


class Stage(Protocol):
    """What a stream needs of its stage (reference/codec/stage.py's CodecStage)."""

    codec: Codec
    max_inflight_chunks: int
    record: StageRecord
    on_first_chunk: Callable[[float], None] | None

    def _submit(self, job: Job) -> None: ...

    def carried_stream(self, geometry: StreamGeometry) -> CarriedStream | None: ...

    def _drop(self, stream: StageStream) -> None: ...


class StageStream:
    """One stream's side of the stage: a producer pushes frames, a consumer takes chunks."""

    def __init__(self, stage: Stage, geometry: StreamGeometry) -> None:
        self.stage = stage
        self.cutter = ChunkCutter(geometry, stage.codec.cfg.num_codebooks)
        self.carried = stage.carried_stream(geometry)  # None: its chunks decode windows
        self._room = asyncio.Semaphore(stage.max_inflight_chunks)
        self._out: asyncio.Queue = asyncio.Queue()  # futures of the chunks in order, then _END or an error
        self.inflight = 0  # chunks submitted and not yet delivered
        self.closed = False
        self.first_cut: float | None = None  # when its first window went to the stage (time.monotonic)
        self.started: float | None = None  # when its first chunk was delivered (time.monotonic)
        self.delivered_s = 0.0  # audio seconds delivered

    @property
    def deadline(self) -> float | None:
        """When the audio delivered so far has played out, were playback to start at the first
        delivery; None before any audio (the client waits for its first chunk now)."""
        return None if self.started is None else self.started + self.delivered_s

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise StreamClosed(f"{what} on a closed stage stream: open a new one per stream")

    async def push(self, frames: torch.Tensor) -> None:
        """frames LongTensor [8, n] (reverted, real); waits while the stream is at its limit."""
        self._check_open("push")
        self.stage.codec.check_codes(frames)
        self.cutter.add(frames)
        await self._submit_ready()

    async def finish(self) -> None:
        """Ends the stream: the rest is cut in chunks of the usual sizes."""
        self._check_open("finish")
        self.cutter.end()
        await self._submit_ready()
        self._out.put_nowait(_END)

    def fail(self, error: Exception) -> None:
        """The producer failed: the consumer raises `error` after the chunks already submitted."""
        self._out.put_nowait(error)

    async def _submit_ready(self) -> None:
        while self.cutter.ready():
            await self._room.acquire()  # back-pressure: no cut beyond max_inflight_chunks
            self._check_open("push")
            self.inflight += 1
            self.stage.record.most_inflight = max(self.stage.record.most_inflight, self.inflight)
            future = asyncio.get_running_loop().create_future()
            self._out.put_nowait(future)
            self.first_cut = self.first_cut or time.monotonic()
            if self.carried is None:
                self.stage._submit(Job(self, self.cutter.cut(), future))
            else:
                cut = Cut.of(self.cutter)
                self.stage._submit(Job(self, cut.window, future, cut))

    async def next_chunk(self) -> torch.Tensor | None:
        """The next PCM chunk [frames * 960], None after the last; raises a codec or producer error."""
        self._check_open("next_chunk")
        item = await self._out.get()
        if item is _END:
            self._out.put_nowait(_END)  # stays ended
            return None
        if isinstance(item, Exception):
            raise item
        try:
            chunk = await item
        finally:
            self.inflight -= 1
            self._room.release()
        if self.started is None:
            self.started = time.monotonic()
            if self.stage.on_first_chunk is not None:
                self.stage.on_first_chunk(self.started - self.first_cut)
        self.delivered_s += len(chunk) / self.stage.codec.cfg.sample_rate
        return chunk

    def close(self) -> None:
        """Drops what is pending or undelivered; wakes a producer waiting for room (it raises)."""
        if self.closed:
            return
        self.closed = True
        self.stage._drop(self)
        while not self._out.empty():
            item = self._out.get_nowait()
            if isinstance(item, asyncio.Future):
                item.cancel()
                self.stage.record.dropped += 1
        self._room.release()


async def feed(stream: StageStream, frames: AsyncIterator[torch.Tensor]) -> None:
    """Pushes `frames` into `stream`, then finishes it; a failure goes to the consumer. Closes
    `frames` however it ends (cancelled included), which aborts its request."""
    try:
        async for chunk_frames in frames:
            await stream.push(chunk_frames)
        await stream.finish()
    except StreamClosed:
        pass  # the consumer left
    except Exception as exc:  # the source (the engine) or bad codes: the consumer raises it
        stream.fail(exc)
    finally:
        aclose = getattr(frames, "aclose", None)
        if aclose is not None:
            await aclose()
