"""The code2wav stage: one codec worker per engine, decoding the ready chunks of every stream in
batches, with back-pressure per stream. It is what reads the deploy profile's codec settings
(`CodecStage.from_deployment`): stage 1's `max_num_seqs` is the batch, the talker connector's
`extra.max_inflight_chunks` the per-stream limit (2 where the file does not set it: upstream's
files never do), `extra.codec_tf32` whether the codec's convolutions may use TF32 on CUDA (false
where unset: full float32, reference/codec/model.py).

- A stream (`open`, reference/codec/stage_stream.py) cuts its frames into windows with the
  geometry (ChunkCutter, reference/codec/streaming.py) as its producer pushes them (`push`,
  `finish`); its consumer takes the PCM chunks in order (`next_chunk`). `stream(frames)` runs both
  over an async iterator of frames, the producer in a task of its own.
- Back-pressure: a stream has at most `max_inflight_chunks` chunks submitted and not yet taken by
  its consumer; at the limit `push` waits before cutting the next chunk.
- Each frame decoded once: a stream whose geometry covers the decoder's reach (every shipped
  CUDA profile's) carries each decoder layer's state from one chunk to the next (reference/codec/
  carried.py; its slot in the stage's StatePool from its first chunk to its end or close), so a
  chunk decodes its new frames only: 25 for a steady chunk of `default`, where its window is 45.
  A geometry short of the reach (upstream's) decodes windows, whose edges it asks for; so does a
  stage built with `carried=False` (the profile's `extra.codec_carried_state: false`, to compare),
  and a whole clip (`decode`).
- Batching: while chunks are pending, one worker task takes the most urgent pending chunk's
  shape (a window's length; a carried stream's new frames, and whether they end it) and up to
  `max_batch_size` pending chunks of exactly that shape, most urgent first, and decodes them as
  one batch (Codec.decode_batch; carried: reference/codec/carried.py's `advance`); a carried
  stream's chunks in order, one a batch. Urgency is the playback deadline
  (StageStream.deadline): a stream without audio yet (a first chunk; a whole decode) comes first,
  oldest first; then the stream whose delivered audio runs out soonest. So a new stream's first
  window is not queued behind the steady chunks of streams that still have audio to play (FIFO
  did that at 64 streams on the H200: first audio after 3.3 s). Never padded: no code is silence (code 0 is a sound) and the
  decoder reaches 10 frames each way, so padding would change the kept samples of any chunk whose
  look-ahead is short (the last chunk has none). Equal lengths leave only float rounding, so the
  stream = offline bound holds for batched chunks (tests/test_codec_stage.py).
- The decode runs in a thread (asyncio.to_thread): the event loop driving the engine runs on. The
  chunks come back on the host, copied there in that thread, so the event loop never waits for
  the device.
  The worker task lives only while windows are pending, so it never outlives its loop.
- close() takes a stream's pending windows out of the queue and drops its undelivered chunks;
  nothing reaches a closed stream. A failed decode fails every chunk of its batch with
  CodecStageError, which their consumers raise; the worker goes on with the rest.
- `record`: decodes per batch size, the most chunks in flight of any stream, the chunks dropped.
  `on_first_chunk`, where set, is called with each stream's wait for its first chunk: from its first
  window's cut to the chunk's delivery (the server's higgs_serve_first_decode_seconds).
- `warm()`: a window of each length a stream's cuts take, decoded once before the first stream (a
  server at its start), so no request pays the decoder's first-use costs (kernel loading, the
  allocator's first blocks); nothing is delivered or recorded. On CUDA it then captures those
  lengths as graphs (reference/codec/graphs.py), which every later batch that fits one replays.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable

import torch

from reference.codec.carried import CarriedDecoder, CarriedStream, Cut, StatePool, advance
from reference.codec.carried_graphs import CarriedGraphs
from reference.codec.geometry import StreamGeometry
from reference.codec.graphs import DecodeGraphs
from reference.codec.model import Codec
from reference.codec.stage_stream import Job, StageRecord, StageStream, StreamClosed, feed
from reference.codec.streaming import ChunkCutter, Window

__all__ = ["CodecStage", "CodecStageError", "StageRecord", "StageStream", "StreamClosed"]

DEFAULT_MAX_INFLIGHT_CHUNKS = 2
BATCH_SETTING = "stages.1.max_num_seqs (the codec batch)"
INFLIGHT_SETTING = "extra.max_inflight_chunks of the talker's output connector"
CARRIED_SETTING = "extra.codec_carried_state of the talker's output connector"
TF32_SETTING = "extra.codec_tf32 of the talker's output connector"


class CodecStageError(RuntimeError):
    """A decode of the stage failed; raised by every stream with a chunk in that batch."""


def _setting(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}; set it in the deploy profile "
                         "(python -m reference.deploy PROFILE prints the resolved value)")
    return value


class CodecStage:
    def __init__(self, codec: Codec, max_batch_size: int, max_inflight_chunks: int,
                 geometry: StreamGeometry | None = None, carried: bool = True) -> None:
        self.codec, self.geometry, self.carried = codec, geometry, carried
        self.max_batch_size = _setting(BATCH_SETTING, max_batch_size)
        self.max_inflight_chunks = _setting(INFLIGHT_SETTING, max_inflight_chunks)
        self.record = StageRecord()
        self.on_first_chunk: Callable[[float], None] | None = None  # each stream's first window: cut -> delivered, s
        self.graphs: DecodeGraphs | None = None  # captured by warm() on CUDA
        self.carried_graphs: CarriedGraphs | None = None  # likewise, where streams carry their state
        self._pending: list[Job] = []
        self._worker: asyncio.Task | None = None
        self._pool: StatePool | None = None  # the carried streams' states, made with the first of them
        self._decoding: set[StageStream] = set()  # the streams of the batch being decoded

    @classmethod
    def from_deployment(cls, deployment, codec: Codec) -> CodecStage:
        """The stage a resolved deployment (reference/deploy/resolve.py) asks for."""
        if deployment.codec_stage is None:
            raise ValueError(f"{deployment.profile}: stages: no stage_id 1 (code2wav); add one, its max_num_seqs "
                             "is the codec batch")
        batch = deployment.codec_stage.get("max_num_seqs")
        if batch is None:
            raise ValueError(f"{deployment.profile}: {BATCH_SETTING} is not set; set it in stage_id 1")
        extra = (deployment.connectors.get(deployment.geometry_connector) or {}).get("extra") or {}
        inflight = extra.get("max_inflight_chunks", DEFAULT_MAX_INFLIGHT_CHUNKS)
        carried, tf32 = extra.get("codec_carried_state", True), extra.get("codec_tf32", False)
        for name, value in ((CARRIED_SETTING, carried), (TF32_SETTING, tf32)):
            if not isinstance(value, bool):
                raise ValueError(f"{deployment.profile}: {name} must be true or false, got {value!r}")
        codec.tf32 = tf32  # before warm() captures its graphs
        return cls(codec, batch, inflight, deployment.geometry, carried)

    def warm(self) -> list[int]:
        """Decodes once each shape the geometry's cuts take up to the steady chunks (the first
        chunk's, the growing ones', then each later one's until its left context is whole): for a
        carried stream its new frames per chunk, else its windows' lengths, which on CUDA it then
        captures as graphs for every batch bucket; those frame counts. Blocking: run it before
        serving, or in a thread."""
        if self.geometry is None:
            raise ValueError("CodecStage.warm: no geometry; build the stage with CodecStage.from_deployment")
        g, books = self.geometry, self.codec.cfg.num_codebooks
        cutter = ChunkCutter(g, books)
        steady = g.ramp_frames() + (2 + math.ceil(g.left_context_frames / g.chunk_frames)) * g.chunk_frames
        cutter.add(torch.zeros(books, steady + g.right_holdback_frames, dtype=torch.long))
        if (carried := self.carried_stream(g)) is not None:
            decoded = []
            while cutter.ready():  # as decode_carried does, one stream
                cut = Cut.of(cutter)
                decoded.append(cut.new_frames(carried))
                advance([carried], cut.new_codes(carried)[None], last=False)
                cut.take(carried).cpu()  # .cpu(): waits for it
            carried.release()
            decoded = list(dict.fromkeys(decoded))
            if self.codec.codebooks.device.type == "cuda":
                self.carried_graphs = self.carried_graphs or CarriedGraphs(carried.pool, self.max_batch_size)
                self.carried_graphs.capture(decoded)
            return decoded
        lengths = list(dict.fromkeys(w.codes.shape[1] for w in cutter.windows()))
        for length in lengths:
            self.codec.decode_batch(torch.zeros(1, books, length, dtype=torch.long)).cpu()  # .cpu(): waits for it
        if self.codec.codebooks.device.type == "cuda":
            self.graphs = self.graphs or DecodeGraphs(self.codec, self.max_batch_size)
            self.graphs.capture(lengths)
        return lengths

    @property
    def pending(self) -> int:
        """Windows submitted and not yet taken into a batch."""
        return len(self._pending)

    def open(self, geometry: StreamGeometry | None = None) -> StageStream:
        geometry = geometry or self.geometry
        if geometry is None:
            raise ValueError("CodecStage.open: no geometry; pass one, or build the stage with "
                             "CodecStage.from_deployment (the connector's extra holds it)")
        return StageStream(self, geometry)

    async def stream(self, frames: AsyncIterator[torch.Tensor],
                     geometry: StreamGeometry | None = None) -> AsyncIterator[torch.Tensor]:
        """frames [8, n] as they arrive -> PCM chunks [frames * 960] in order. A task feeds the
        stream; closing this iterator cancels it, which closes `frames` (aborting its request)."""
        stream = self.open(geometry)
        feeder = asyncio.create_task(feed(stream, frames))
        try:
            while (chunk := await stream.next_chunk()) is not None:
                yield chunk
        finally:
            stream.close()
            feeder.cancel()
            await asyncio.gather(feeder, return_exceptions=True)

    async def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """A whole clip [8, T] -> PCM [T * 960], decoded by the worker like any window."""
        self.codec.check_codes(codes)
        future = asyncio.get_running_loop().create_future()
        self._submit(Job(None, Window(codes.to(torch.long).cpu(), 0, codes.shape[1]), future))
        return await future

    def _submit(self, job: Job) -> None:
        self._pending.append(job)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._run())

    def _drop(self, stream: StageStream) -> None:
        self._pending = [j for j in self._pending if j.stream is not stream]
        if stream.carried is not None and stream not in self._decoding:  # else after its batch
            stream.carried.release()

    def carried_stream(self, geometry: StreamGeometry) -> CarriedStream | None:
        """A new stream's place in the stage's StatePool, or None where it decodes windows."""
        if not self.carried:
            return None
        pool = self._pool or StatePool(CarriedDecoder(self.codec), slots=2 * self.max_batch_size)
        if pool.decoder.refusal(geometry) is not None:
            return None
        self._pool = pool
        return CarriedStream(pool)

    @property
    def decodes(self) -> str:
        """How the stage's geometry is decoded: "carried" (each frame once) or "windows"."""
        return "windows" if self.geometry is None or self.carried_stream(self.geometry) is None else "carried"

    @property
    def carried_slots_in_use(self) -> int:
        """Streams holding a carried state now (0 once every stream has ended or closed)."""
        return 0 if self._pool is None else self._pool.in_use

    def decode_jobs(self, jobs: list[Job]) -> list[torch.Tensor]:
        """In the worker thread: a batch of one shape (_shape) -> its chunks, on the host."""
        if jobs[0].stream is None or jobs[0].stream.carried is None:
            return _to_host(self.decode_windows([j.window for j in jobs]))
        return _to_host(self.decode_carried(jobs))

    def decode_carried(self, jobs: list[Job]) -> list[torch.Tensor]:
        """Carried streams' next chunks, each stream's new frames of one count: decodes them (and
        the end, for a batch of last chunks) as one batch; then takes each chunk from its stream."""
        streams = [j.stream.carried for j in jobs]
        _, new, last = _shape(jobs[0])
        if new or last:
            codes = torch.stack([j.cut.new_codes(s) for j, s in zip(jobs, streams)])  # [B, 8, new]
            replays = self.carried_graphs.graphs.replays if self.carried_graphs else 0
            advance(streams, codes, last, self.carried_graphs)
            self.record.replayed += self.carried_graphs is not None and self.carried_graphs.graphs.replays > replays
        return [j.cut.take(s) for j, s in zip(jobs, streams)]

    def decode_windows(self, windows: list[Window]) -> list[torch.Tensor]:
        """In the worker thread: windows of one length [8, n] -> their chunks, by a graph's replay
        where one holds them, else eagerly."""
        codes = torch.stack([w.codes for w in windows])  # [B, 8, n]
        pcm = self.graphs.decode(codes) if self.graphs is not None else None  # valid until the next replay
        self.record.replayed += pcm is not None
        if pcm is None:
            pcm = self.codec.decode_batch(codes)  # [B, n * 960]
        return [w.trim(wav, self.codec.hop_length).clone() for w, wav in zip(windows, pcm)]  # copies

    async def _run(self) -> None:
        await asyncio.sleep(0)  # let the other streams woken by the same engine step submit first
        while self._pending:
            heads = _heads(self._pending)
            shape = _shape(min(heads, key=_urgency))
            batch = sorted((j for j in heads if _shape(j) == shape), key=_urgency)[: self.max_batch_size]
            self._pending = [j for j in self._pending if j not in batch]
            self.record.batches[len(batch)] += 1
            for job in batch:
                if job.stream is not None and job.stream.carried is not None:
                    self._decoding.add(job.stream)
                    if job.stream.carried.slot is None and not job.stream.carried.ended:
                        job.stream.carried.slot = job.stream.carried.pool.acquire()  # here: no decode runs
            try:
                chunks = await asyncio.to_thread(self.decode_jobs, batch)
            except asyncio.CancelledError:  # the loop is going away: fail everything, hang nothing
                _fail(batch + self._pending, CodecStageError("the codec stage's worker was cancelled"))
                self._pending = []
                raise
            except Exception as exc:  # every stream of the batch raises it; the others go on
                error = CodecStageError(f"the codec failed on a batch of {len(batch)} windows of {shape[1]} "
                                        f"frames: {type(exc).__name__}: {exc}")
                error.__cause__ = exc
                # a carried stream's state is lost with the batch: its later chunks fail too
                broken = {j.stream for j in batch if j.stream is not None and j.stream.carried is not None}
                _fail(batch + [j for j in self._pending if j.stream in broken], error)
                self._pending = [j for j in self._pending if j.stream not in broken]
                for stream in broken:
                    stream.carried.release()
                continue
            finally:
                for stream in self._decoding:
                    if stream.closed:
                        stream.carried.release()
                self._decoding.clear()
            for job, chunk in zip(batch, chunks):
                if not job.future.done():  # a closed stream's future is cancelled
                    job.future.set_result(chunk)


def _to_host(chunks: list[torch.Tensor]) -> list[torch.Tensor]:
    """A batch's chunks copied to the host in one transfer, in the worker thread: whoever takes a
    chunk on the event loop (the server encoding it) then never waits for the device. A copy
    there waited for every decode queued before it: on an H100 at 64-128 streams it was a third
    of the event loop's busy time (benchmarks/results/2026-12-07-h100-row-path/NOTES.md)."""
    if not chunks or chunks[0].device.type == "cpu":
        return chunks
    return list(torch.cat(chunks).cpu().split([len(c) for c in chunks]))


def _heads(pending: list[Job]) -> list[Job]:
    """The jobs a batch may take: a carried stream's first pending one (its chunks decode in
    order), every other."""
    seen, heads = set(), []
    for job in pending:
        if job.stream is None or job.stream.carried is None or job.stream not in seen:
            heads.append(job)
            seen.add(job.stream)
    return heads


def _shape(job: Job) -> tuple[str, int, bool]:
    """What a batch's jobs share: a window's length; a carried chunk's new frames and whether
    they end its stream (a stream already ended has none)."""
    carried = None if job.stream is None else job.stream.carried
    if carried is None:
        return ("windows", job.window.codes.shape[1], False)
    return ("carried", job.cut.new_frames(carried), job.cut.ends(carried))


def _urgency(job: Job) -> tuple[int, float]:
    """Sorts pending jobs: first chunks and whole decodes (no audio out yet) before the rest, then
    by playback deadline; sorted() and min() are stable, so submission order breaks ties."""
    deadline = None if job.stream is None else job.stream.deadline
    return (0, 0.0) if deadline is None else (1, deadline)


def _fail(jobs: list[Job], error: Exception) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(error)
