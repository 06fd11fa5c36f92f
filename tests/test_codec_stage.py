"""The code2wav stage (reference/codec/stage.py): batched chunks equal chunks alone, the profile's
batch size and in-flight limit change what it does, close and failure, the event loop runs on."""

import asyncio
import copy
import dataclasses
import threading
import time

import pytest
import torch

from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from reference.codec.carried import advance
from reference.codec.geometry import DEFAULT_GEOMETRY, StreamGeometry
from reference.codec.graphs import DecodeGraphs
from reference.codec.stage import CodecStage, CodecStageError, StreamClosed
from reference.codec.streaming import ChunkCutter, agreement, stream_chunks
from reference.cuda_graphs import batch_buckets
from reference.deploy.resolve import resolve_deployment

pytestmark = pytest.mark.cpu
HOP = 960
# Stitches exactly (left context and holdback cover the 10-frame reach) with short windows: 12, then 26 frames.
SMALL = StreamGeometry(first_chunk_frames=2, chunk_frames=6, left_context_frames=10, right_holdback_frames=10)
BOUND = {"min_snr_db": 100.0, "max_abs_err": 1.0e-5}  # conformance/cases/codec/streaming.yaml


@pytest.fixture(autouse=True)
def _single_thread():
    with one_torch_thread():
        yield


def codes_of(frames: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 1024, (8, frames), generator=torch.Generator().manual_seed(seed))  # [8, T]


async def lockstep(stage: CodecStage, clips: list[torch.Tensor], geometry=SMALL) -> list[list[torch.Tensor]]:
    """One frame into every stream per step (as one engine step feeds them all), consumers apart."""
    streams = [stage.open(geometry) for _ in clips]

    async def consume(stream):
        return [c async for c in _chunks(stream)]

    consumers = [asyncio.create_task(consume(s)) for s in streams]
    for t in range(clips[0].shape[1]):
        for stream, codes in zip(streams, clips):
            await stream.push(codes[:, t : t + 1])
        await asyncio.sleep(0)
    for stream in streams:
        await stream.finish()
    return await asyncio.gather(*consumers)


async def _chunks(stream):
    while (chunk := await stream.next_chunk()) is not None:
        yield chunk


def test_a_batch_of_windows_equals_each_window_alone():
    codec = fixture_codec()
    codes = torch.stack([codes_of(26, seed) for seed in range(4)])  # [4, 8, 26]
    batch = codec.decode_batch(codes)  # [4, 26 * 960]
    for b in range(4):
        torch.testing.assert_close(batch[b], codec.decode(codes[b]), atol=BOUND["max_abs_err"], rtol=0)
    assert torch.equal(codec.decode_batch(codes[:1])[0], codec.decode(codes[0]))  # one window: decode's own ops
    with pytest.raises(ValueError, match=r"\[B, 8, T\]"):
        codec.decode_batch(codes[0])


@pytest.mark.parametrize("batch", [1, 4])
def test_batched_streams_stitch_into_the_offline_decode(batch):
    codec = fixture_codec()
    clips = [codes_of(30, seed) for seed in range(4)]
    streamed = asyncio.run(lockstep(CodecStage(codec, batch, 2), clips))
    for codes, chunks in zip(clips, streamed):
        assert [len(c) for c in chunks] == [len(c) for c in stream_chunks(codec, codes, SMALL)]
        measured = agreement(torch.cat(chunks), codec.decode(codes))
        assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], measured


# Every stream length modulo the chunk: shorter than the first chunk, the first chunk's edge and the
# two frames past it, then a later chunk edge and the two frames past it.
LOW_LATENCY = StreamGeometry(first_chunk_frames=1, chunk_frames=25, left_context_frames=10, right_holdback_frames=10)
EDGES = {
    "small": (SMALL, [1, 2, 3, 4, 8, 9, 10, 14, 15, 16]),
    "default": (DEFAULT_GEOMETRY, [3, 7, 8, 9, 10, 16, 17, 18, 32, 33, 34, 57, 58, 59]),  # chunks end at 8, 16, 32, 57
    "low_latency": (LOW_LATENCY, [1, 2, 3, 26, 27, 28, 51, 52]),
}


async def side_by_side(stage: CodecStage, clips: list[torch.Tensor], geometry, push: int) -> list[list[torch.Tensor]]:
    """Streams of their own lengths at once, `push` frames at a time: each ends while others go on."""
    streams = [stage.open(geometry) for _ in clips]
    consumers = [asyncio.create_task(_gather(s)) for s in streams]
    for t in range(0, max(c.shape[1] for c in clips), push):
        for stream, codes in zip(streams, clips):
            if t < codes.shape[1]:
                await stream.push(codes[:, t : t + push])
                if t + push >= codes.shape[1]:
                    await stream.finish()
        await asyncio.sleep(0)
    return await asyncio.gather(*consumers)


async def _gather(stream):
    return [c async for c in _chunks(stream)]


@pytest.mark.parametrize("push", [1, 3])
@pytest.mark.parametrize("name", sorted(EDGES))
def test_streams_of_every_length_at_the_chunk_edges_lose_no_frame(name, push):
    """Issue #33 item 7: the streamed audio is the offline decode with every frame (T * 960
    samples) at each length around the chunk edges, streams ending beside each other in batches."""
    geometry, lengths = EDGES[name]
    codec = fixture_codec()
    clips = [codes_of(n, seed) for seed, n in enumerate(lengths)]
    streamed = asyncio.run(side_by_side(CodecStage(codec, 4, 2), clips, geometry, push))
    for codes, chunks in zip(clips, streamed):
        audio = torch.cat(chunks)
        assert len(audio) == codes.shape[1] * HOP, f"{codes.shape[1]} frames streamed as {len(audio) / HOP:g}"
        measured = agreement(audio, codec.decode(codes))
        assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], (
            f"{codes.shape[1]} frames: {measured}")


class OrderedStage(CodecStage):
    """Notes which stream each decoded window came from (its codes are all that stream's mark)."""

    order: list

    def decode_jobs(self, jobs):
        self.order = getattr(self, "order", []) + [int(j.window.codes[0, 0]) for j in jobs]
        return super().decode_jobs(jobs)


def test_a_first_window_is_decoded_before_the_backlog_of_streams_with_audio_to_play():
    """Playback deadline first: stream 1 still has a second of audio to play and four windows
    pending; stream 3, whose client waits for its first audio, submits one window after them, and
    stream 2 (audio running out sooner than stream 1's) after that. One window a batch: 3, 2, then
    stream 1's. (First in, first out decoded stream 1's four first.)"""
    stage = OrderedStage(fixture_codec(), 1, 8)

    async def run():
        streams = {mark: stage.open(SMALL) for mark in (1, 2, 3)}
        streams[1].started, streams[1].delivered_s = time.monotonic(), 1.0
        streams[2].started, streams[2].delivered_s = time.monotonic(), 0.5
        await streams[1].push(torch.full((8, 34), 1))  # four windows ready (12, 18, 24, 30 frames)
        await streams[3].push(torch.full((8, 12), 3))  # its first window
        await streams[2].push(torch.full((8, 12), 2))  # its first window, deadline before stream 1's
        while len(getattr(stage, "order", [])) < 6:  # every window pushed is decoded; nothing more is cut
            await asyncio.sleep(0.01)
        for stream in streams.values():
            await stream.finish()
        return [await _gather(s) for s in streams.values()]

    asyncio.run(run())
    assert stage.order[:6] == [3, 2, 1, 1, 1, 1], stage.order


class SlowStage(CodecStage):
    """Each batch's decode takes at least DECODE_S longer."""

    def decode_jobs(self, jobs):
        time.sleep(SlowStage.DECODE_S)
        return super().decode_jobs(jobs)

    DECODE_S = 0.2


def test_each_streams_wait_for_its_first_chunk_is_told_once_from_its_first_cut():
    """The server's higgs_serve_first_decode_seconds: from the first window's cut to its chunk, one a stream.
    The second stream's first window is cut while the first stream's batch decodes, so it waits for that
    batch and its own."""
    stage, waits = SlowStage(fixture_codec(), 1, 8), []
    stage.on_first_chunk = waits.append

    async def run():
        first, second = stage.open(SMALL), stage.open(SMALL)
        await first.push(codes_of(26, 1))  # windows of 12 and 18 frames: its second is cut with its first
        await asyncio.sleep(0.05)  # the first window's batch decoding
        await second.push(codes_of(12, 2))
        for stream in (first, second):
            await stream.finish()
        return [await _gather(s) for s in (first, second)]

    chunks = asyncio.run(run())
    assert all(len(c) >= 2 for c in chunks)  # later chunks tell nothing
    assert len(waits) == 2
    assert SlowStage.DECODE_S <= waits[0] < 3 * SlowStage.DECODE_S
    assert waits[1] > 1.25 * SlowStage.DECODE_S  # behind the rest of the first window's batch, then its own


def test_the_codec_batch_setting_changes_the_batching():
    clips = [codes_of(30, seed) for seed in range(4)]
    one, four = CodecStage(fixture_codec(), 1, 2), CodecStage(fixture_codec(), 4, 2)
    asyncio.run(lockstep(one, clips))
    asyncio.run(lockstep(four, clips))
    chunks = 4 * len(stream_chunks(fixture_codec(), clips[0], SMALL))
    assert one.record.batches == {1: chunks}
    assert sum(size * n for size, n in four.record.batches.items()) == chunks and max(four.record.batches) == 4
    assert four.record.batches.total() < chunks // 2


@pytest.mark.parametrize("limit", [1, 3])
def test_max_inflight_chunks_holds_the_producer_back(limit):
    stage = CodecStage(fixture_codec(), 4, limit)

    async def run():
        stream = stage.open(SMALL)
        producer = asyncio.create_task(stream.push(codes_of(60, 1)))  # 9 chunks ready at once
        for _ in range(50):
            await asyncio.sleep(0.01)
        blocked = (producer.done(), stream.inflight)
        taken = [await stream.next_chunk() for _ in range(2)]
        stream.close()  # wakes the producer waiting for room: it raises StreamClosed
        with pytest.raises(StreamClosed):
            await producer
        return blocked, taken

    (done, inflight), taken = asyncio.run(run())
    assert (done, inflight) == (False, limit)  # waits before cutting the chunk beyond the limit
    assert stage.record.most_inflight == limit and all(len(c) > 0 for c in taken)


def test_close_drops_pending_chunks_and_spares_the_other_stream():
    stage = CodecStage(fixture_codec(), 4, 8)
    clip = codes_of(40, 2)

    async def run():
        doomed, kept = stage.open(SMALL), stage.open(SMALL)
        await doomed.push(clip)  # 5 chunks submitted, none decoded yet
        await kept.push(clip)
        doomed.close()
        assert stage.pending == 5  # only the other stream's
        await kept.finish()
        with pytest.raises(StreamClosed, match="closed stage stream"):
            await doomed.next_chunk()
        with pytest.raises(StreamClosed):
            await doomed.push(clip)
        return [c async for c in _chunks(kept)]

    chunks = asyncio.run(run())
    alone = torch.cat(stream_chunks(fixture_codec(), clip, SMALL))
    torch.testing.assert_close(torch.cat(chunks), alone, atol=BOUND["max_abs_err"], rtol=0)
    assert stage.record.dropped == 5 and stage.pending == 0


def test_closing_the_stream_iterator_closes_its_source():
    stage, closed = CodecStage(fixture_codec(), 4, 2), []

    async def source():
        try:
            for t in range(200):
                yield codes_of(1, t)
                await asyncio.sleep(0)
        finally:
            closed.append(True)

    async def run():
        chunks = stage.stream(source(), SMALL)
        first = await anext(chunks)
        await chunks.aclose()
        return first

    assert len(asyncio.run(run())) == SMALL.first_chunk_frames * HOP
    assert closed == [True] and stage.pending == 0


def test_a_codec_failure_reaches_every_stream_of_the_batch_and_the_stage_goes_on():
    stage = CodecStage(fixture_codec(), 4, 2)
    real, calls = stage.decode_jobs, []

    def failing(jobs):
        calls.append(len(jobs))
        if len(calls) == 1:
            raise RuntimeError("CUDA out of memory (planted)")
        return real(jobs)

    stage.decode_jobs = failing

    async def run():
        streams = [stage.open(SMALL) for _ in range(2)]
        for s in streams:
            await s.push(codes_of(12, 3))  # one 12-frame window each: one batch
        errors = []
        for s in streams:
            with pytest.raises(CodecStageError, match="batch of 2 windows of 12 frames: RuntimeError: CUDA out of"):
                await asyncio.wait_for(s.next_chunk(), timeout=30)
            errors.append(True)
        later = stage.open(SMALL)
        await later.push(codes_of(12, 3))
        return errors, await asyncio.wait_for(later.next_chunk(), timeout=30)

    errors, chunk = asyncio.run(run())
    assert errors == [True, True] and calls[0] == 2 and len(chunk) == 2 * HOP


def test_a_source_failure_reaches_the_consumer():
    stage = CodecStage(fixture_codec(), 4, 2)

    async def source():
        yield codes_of(12, 4)
        raise ConnectionError("engine died (planted)")

    async def run():
        return [c async for c in stage.stream(source(), SMALL)]

    with pytest.raises(ConnectionError, match="planted"):
        asyncio.run(asyncio.wait_for(run(), timeout=30))


def test_decoding_runs_off_the_event_loop():
    stage = CodecStage(fixture_codec(), 4, 2)
    real, threads, decoding, ticked = stage.decode_jobs, [], threading.Event(), threading.Event()

    def slow(jobs):  # holds the decode until the loop has turned three times during it (or 30 s)
        threads.append(threading.current_thread())
        decoding.set()
        ticked.wait(timeout=30)
        decoding.clear()
        return real(jobs)

    stage.decode_jobs = slow

    async def run():
        ticks = 0

        async def ticker():  # counts the loop's turns while a decode is running
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += decoding.is_set()
                if ticks >= 3:
                    ticked.set()

        task = asyncio.create_task(ticker())
        stream = stage.open(SMALL)
        await stream.push(codes_of(12, 5))
        await stream.next_chunk()
        task.cancel()
        return ticks

    # A decode on the loop's thread would leave it no turn while decoding (the wait runs out with none);
    # beside the decode the loop turns however loaded the machine is: the count is not a speed figure.
    assert asyncio.run(run()) >= 3
    assert threads and threads[0] is not threading.main_thread()


def test_tf32_convolutions_are_opt_in_and_the_decodes_run_as_chosen():
    """extra.codec_tf32 (default false) sets whether cuDNN may use TF32 in the codec's convolutions: read during
    a whole decode and a carried step (on the CPU the flag changes no arithmetic; on CUDA it does)."""
    codec, seen = copy.deepcopy(fixture_codec()), []
    codec.acoustic_decoder.register_forward_pre_hook(lambda *_: seen.append(torch.backends.cudnn.allow_tf32))
    d = resolve_deployment("default", "cuda")
    for setting, expected in (({}, False), ({"connectors.talker_to_code2wav.extra.codec_tf32": True}, True)):
        stage = CodecStage.from_deployment(resolve_deployment("default", "cuda", setting), codec)
        assert codec.tf32 is expected
        seen.clear()
        codec.decode(codes_of(4, 0))
        stream = stage.carried_stream(SMALL)
        step = stream.pool.decoder.step
        stream.pool.decoder.step = lambda *a: seen.append(torch.backends.cudnn.allow_tf32) or step(*a)
        advance([stream], codes_of(12, 1)[None], last=False)
        stream.release()
        assert seen == [expected, expected]
    with pytest.raises(ValueError, match=r"extra.codec_tf32 of the talker's output connector must be true or false, "
                                         r"got 1"):
        CodecStage.from_deployment(dataclasses.replace(d, connectors={d.geometry_connector: {"extra": {
            "codec_tf32": 1}}}), codec)


def test_settings_come_from_the_resolved_deployment_and_bad_ones_are_named():
    codec = fixture_codec()
    for profile, platform, batch, inflight in [("default", "cuda", 16, 4), ("default", "cpu", 4, 2),
                                               ("h200_v2", "cuda", 64, 8), ("many_streams_v2", "cuda", 256, 8)]:
        d = resolve_deployment(profile, platform)
        stage = CodecStage.from_deployment(d, codec)
        assert (stage.max_batch_size, stage.max_inflight_chunks, stage.geometry) == (batch, inflight, d.geometry)
    d = resolve_deployment("default", "cuda")
    assert CodecStage.from_deployment(d, codec).carried
    windows = resolve_deployment("default", "cuda", {"connectors.talker_to_code2wav.extra.codec_carried_state": False})
    assert not CodecStage.from_deployment(windows, codec).carried
    with pytest.raises(ValueError, match=r"extra.codec_carried_state of the talker's output connector must be true or "
                                         r"false, got 'no'"):
        CodecStage.from_deployment(dataclasses.replace(d, connectors={d.geometry_connector: {"extra": {
            "codec_carried_state": "no"}}}), codec)
    with pytest.raises(ValueError, match="no stage_id 1"):
        CodecStage.from_deployment(dataclasses.replace(d, codec_stage=None), codec)
    with pytest.raises(ValueError, match=r"stages.1.max_num_seqs \(the codec batch\) must be an integer >= 1, got 0"):
        CodecStage(codec, 0, 2)
    with pytest.raises(ValueError, match="max_inflight_chunks .* got True"):
        CodecStage(codec, 4, True)
    with pytest.raises(ValueError, match="no geometry"):
        CodecStage(codec, 4, 2).open()


@pytest.mark.gpu
@pytest.mark.parametrize("carried", [True, False], ids=["carried", "windows"])
@pytest.mark.parametrize("size", ["tiny", "4b"])
def test_on_cuda_batched_streams_stitch_into_the_offline_decode(size, carried):
    # cuDNN picks its algorithm per batch shape (reference/codec/model.py decodes in full float32).
    codec = copy.deepcopy(fixture_codec(size)).to("cuda")
    clips = [codes_of(60, seed) for seed in range(8)]
    stage = CodecStage(codec, 8, 2, carried=carried)
    streamed = asyncio.run(lockstep(stage, clips))
    assert max(stage.record.batches) == 8
    assert {c.device.type for chunks in streamed for c in chunks} == {"cpu"}, "the event loop would wait for the GPU"
    for codes, chunks in zip(clips, streamed):
        measured = agreement(torch.cat(chunks), codec.decode(codes))
        assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], measured


@pytest.mark.gpu
def test_on_cuda_warm_captures_every_bucket_and_replays_stitch_into_the_offline_decode():
    codec = copy.deepcopy(fixture_codec("tiny")).to("cuda")
    stage = CodecStage(codec, 8, 2, geometry=SMALL, carried=False)
    lengths = stage.warm()
    assert stage.graphs.captured == [(b, n) for n in lengths for b in (8, 4, 2, 1)]
    eager, real = [], codec.decode_batch
    codec.decode_batch = lambda codes: eager.append(codes.shape[2]) or real(codes)
    clips = [codes_of(60, seed) for seed in range(3)]  # 3 streams: bucket 4, its last row code 0
    streamed = asyncio.run(lockstep(stage, clips))
    codec.decode_batch = real
    assert stage.record.replayed == stage.record.batches.total() - len(eager) > 0
    assert eager and not set(eager) & set(lengths), "only the last chunks' lengths decode eagerly"
    for codes, chunks in zip(clips, streamed):
        measured = agreement(torch.cat(chunks), codec.decode(codes))
        assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], measured
    bad = torch.stack([codes_of(lengths[0], 1)])
    bad[0, 3, 2] = 1025  # EOC: must be named, not read past the codebook inside the graph
    with pytest.raises(ValueError, match=r"out of range at \[codebook, frame\]: \[3, 2\]=1025"):
        stage.graphs.decode(bad)


def test_graph_buckets_and_where_graphs_are_refused():
    assert batch_buckets(1) == [1]
    assert batch_buckets(4) == [1, 2, 4]
    assert batch_buckets(16) == [1, 2, 4, 8, 16]
    assert batch_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert batch_buckets(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    with pytest.raises(ValueError, match="DecodeGraphs: CUDA graphs need a CUDA device, got cpu"):
        DecodeGraphs(fixture_codec(), 4)
    stage = CodecStage(fixture_codec(), 4, 2, geometry=SMALL)
    stage.warm()
    assert stage.graphs is None  # on the CPU every batch decodes eagerly
    asyncio.run(lockstep(stage, [codes_of(30, 1)]))
    assert stage.record.replayed == 0 and stage.record.batches


@pytest.mark.parametrize("geometry, lengths", [
    (SMALL, [12, 18, 24, 26]),  # 2 + 10; then left context 2, 8, 10 (whole) + 6 + 10
    (StreamGeometry(8, 25, 10, 10), [18, 43, 45]),  # the V2 default's frames, upstream's chunking
    (DEFAULT_GEOMETRY, [18, 26, 36, 45]),  # growing: left context 8, 10, 10 + 8, 16, 25 + 10
    (StreamGeometry(1, 25, 10, 10, growing_chunks=True), [11, 12, 14, 18, 26, 36, 45]),  # low_latency_v2's
    (StreamGeometry(1, 25, 25, 4), [5, 30, 54]),  # upstream's V1 geometry
])
def test_warm_decodes_each_window_length_a_stream_takes_once(geometry, lengths):
    codec = fixture_codec()
    stage = CodecStage(codec, max_batch_size=4, max_inflight_chunks=2, geometry=geometry, carried=False)
    decoded = []
    real = codec.decode_batch
    codec.decode_batch = lambda codes: decoded.append(tuple(codes.shape)) or real(codes)
    assert stage.warm() == lengths
    assert decoded == [(1, 8, n) for n in lengths]
    cutter = ChunkCutter(geometry, 8)
    cutter.add(torch.zeros(8, 500, dtype=torch.long))  # a long stream, before its end
    assert {w.codes.shape[1] for w in cutter.windows()} == set(lengths), "every cut's length was warmed"
    assert not stage.record.batches and stage.pending == 0, "a warm-up is no stream's batch"


@pytest.mark.parametrize("geometry, new_frames", [
    (SMALL, [12, 6]),  # 2 + 10 holdback, then 6 a chunk
    (DEFAULT_GEOMETRY, [18, 8, 16, 25]),
    (StreamGeometry(1, 25, 10, 10, growing_chunks=True), [11, 1, 2, 4, 8, 16, 25]),  # low_latency_v2's
])
def test_warm_decodes_each_count_of_new_frames_a_carried_stream_takes_once(geometry, new_frames):
    stage = CodecStage(fixture_codec(), max_batch_size=4, max_inflight_chunks=2, geometry=geometry)
    assert stage.warm() == new_frames
    assert stage.carried_slots_in_use == 0 and not stage.record.batches


@pytest.mark.parametrize("geometry", [SMALL, DEFAULT_GEOMETRY])
def test_carried_chunks_equal_windowed_chunks(geometry):
    """Issue #52 item 2: the stage decodes each frame once, and its chunks are the windows' chunks."""
    clips = [codes_of(n, seed) for seed, n in enumerate([3, 30, 57, 61])]
    carried, windowed = CodecStage(fixture_codec(), 4, 2), CodecStage(fixture_codec(), 4, 2, carried=False)
    streamed = asyncio.run(side_by_side(carried, clips, geometry, 1))
    expected = asyncio.run(side_by_side(windowed, clips, geometry, 1))
    for codes, chunks, reference in zip(clips, streamed, expected):
        assert [len(c) for c in chunks] == [len(c) for c in reference]
        measured = agreement(torch.cat(chunks), codec_decode(codes))
        assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], measured
    assert carried.carried_slots_in_use == 0, "every stream ended: every state freed"


def codec_decode(codes):
    return fixture_codec().decode(codes)


def test_a_geometry_short_of_the_decoders_reach_decodes_windows():
    stage = CodecStage(fixture_codec(), 4, 2)
    assert stage.open(StreamGeometry(8, 25, 8, 0)).carried is None  # upstream's V2 geometry: its windows' edges
    assert stage.open(SMALL).carried is not None
    assert CodecStage(fixture_codec(), 4, 2, carried=False).open(SMALL).carried is None
    assert CodecStage(fixture_codec(), 4, 2, geometry=SMALL).decodes == "carried"
    assert CodecStage(fixture_codec(), 4, 2, geometry=StreamGeometry(8, 25, 8, 0)).decodes == "windows"


def test_an_aborted_stream_frees_its_state_and_the_next_stream_starts_from_zeros():
    """Issue #52 item 6: a stream closed mid-stream (while its chunk decodes, and between chunks)
    gives its state back; the stream that takes the slot next decodes as if alone."""
    stage = CodecStage(fixture_codec(), 4, 8)
    real, entered, release = stage.decode_jobs, threading.Event(), threading.Event()

    def held(jobs):  # the first decode waits until the test has closed its stream
        if not entered.is_set():
            entered.set()
            release.wait(timeout=30)
        return real(jobs)

    stage.decode_jobs = held
    clip = codes_of(40, 7)

    async def run():
        during = stage.open(SMALL)
        await during.push(clip)  # its chunks queue; the first decodes and is held
        while not entered.is_set():
            await asyncio.sleep(0.01)
        slot = during.carried.slot
        during.close()  # its slot is still in the batch being decoded: freed once that ends
        held_slots = stage.carried_slots_in_use
        release.set()
        while stage._worker is not None and not stage._worker.done():
            await asyncio.sleep(0.01)
        freed_after_batch = stage.carried_slots_in_use
        between = stage.open(SMALL)
        await between.push(clip[:, :12])  # one chunk (2 + 10 holdback)
        first = await between.next_chunk()
        reused = between.carried.slot
        between.close()  # between chunks: freed at once
        freed_at_once = stage.carried_slots_in_use
        after = stage.open(SMALL)
        consumer = asyncio.create_task(_gather(after))
        await after.push(clip)
        await after.finish()
        return slot, held_slots, freed_after_batch, first, reused, freed_at_once, await consumer

    slot, held_slots, freed_after_batch, first, reused, freed_at_once, chunks = asyncio.run(run())
    assert (held_slots, freed_after_batch, freed_at_once) == (1, 0, 0)
    assert reused == slot and len(first) == SMALL.first_chunk_frames * HOP
    measured = agreement(torch.cat(chunks), codec_decode(clip))
    assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], measured
    assert stage.carried_slots_in_use == 0


def test_streams_side_by_side_hold_slots_of_their_own():
    stage = CodecStage(fixture_codec(), 4, 2)

    async def run():
        streams = [stage.open(SMALL) for _ in range(5)]
        consumers = [asyncio.create_task(_gather(s)) for s in streams]
        for s, seed in zip(streams, range(5)):
            await s.push(codes_of(14, seed))
        while stage._worker is not None and not stage._worker.done():
            await asyncio.sleep(0.01)
        slots = [s.carried.slot for s in streams]
        for s in streams:
            await s.finish()
        await asyncio.gather(*consumers)
        return slots

    slots = asyncio.run(run())
    assert None not in slots and len(set(slots)) == 5, slots  # five slots although the batch is 4: the pool grew
    assert stage.carried_slots_in_use == 0


@pytest.mark.gpu
def test_on_cuda_warm_captures_carried_steps_and_replays_stitch_into_the_offline_decode():
    codec = copy.deepcopy(fixture_codec("tiny")).to("cuda")
    stage = CodecStage(codec, 8, 2, geometry=SMALL)
    new_frames = stage.warm()
    assert stage.carried_graphs.captured == [(b, n) for n in new_frames for b in (8, 4, 2, 1)]
    clips = [codes_of(60, seed) for seed in range(3)]  # 3 streams: bucket 4, its last row slot 0
    streamed = asyncio.run(lockstep(stage, clips))
    assert stage.record.replayed > 0
    for codes, chunks in zip(clips, streamed):
        measured = agreement(torch.cat(chunks), codec.decode(codes))
        assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], measured
    assert stage.carried_slots_in_use == 0


@pytest.mark.gpu
def test_on_cuda_a_grown_pool_steps_eagerly_and_still_stitches():
    codec = copy.deepcopy(fixture_codec("tiny")).to("cuda")
    stage = CodecStage(codec, 1, 2, geometry=SMALL)  # graphs for 2 slots
    stage.warm()
    clips = [codes_of(30, seed) for seed in range(5)]  # 5 streams at once: the pool grows
    streamed = asyncio.run(lockstep(stage, clips))
    assert stage.carried_graphs.generation != stage.carried_graphs.pool.generation
    for codes, chunks in zip(clips, streamed):
        measured = agreement(torch.cat(chunks), codec.decode(codes))
        assert measured.snr_db >= BOUND["min_snr_db"] and measured.max_abs_err <= BOUND["max_abs_err"], measured
