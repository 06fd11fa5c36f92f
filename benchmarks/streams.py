"""End to end: streams through the speech API, from text to PCM, per concurrency level.

Per level, `c` streams run at once, `rounds` times, each through `SpeechAPI.stream_audio` (the
public streaming API, so whatever runs behind it, e.g. a batching code2wav stage, is measured as
it ships), greedy, on the no_eoc checkpoint, so every stream makes exactly `max_tokens` rows:
- TTFA: request submitted -> first PCM chunk out (the profile's geometry: an 8-frame window plus
  holdback under the V2 default, one frame plus holdback under the V1 profiles);
- RTF: a stream's wall time / its audio duration;
- audio s/s: all audio seconds produced at the level / the level's wall time.
Medians over the streams of a level. The chunks come from the engine's code2wav stage
(reference/codec/stage.py, built from the profile); each level reports the stage's batch sizes.
TTFA is split where the talker hands over: the first audio rows out of the engine (prefill and
the first step), and the frames of the first codec window with its holdback all arrived; the rest
of TTFA is the code2wav stage and the streaming path. The stream is `stream_audio`'s own
composition (the stage over `stream_frames`), with a pass-through that notes those two times.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from reference.speech import SpeechAPI, SpeechRequest

from benchmarks.engine_steps import TEXT


async def _noting_arrivals(frames, window: int, start: float, marks: dict):
    """Passes real frames [8, n] through; notes the first arrival and when `window` frames were in."""
    arrived = 0
    try:
        async for new in frames:
            arrived += new.shape[1]
            marks.setdefault("first_rows_s", time.perf_counter() - start)
            if arrived >= window:
                marks.setdefault("window_s", time.perf_counter() - start)
            yield new
    finally:
        await frames.aclose()  # aborts the request if the stream stopped early


async def _one(api: SpeechAPI, max_tokens: int) -> dict:
    start = time.perf_counter()
    first, samples, marks = None, 0, {}
    request = SpeechRequest(TEXT, sampling={"temperature": 0.0, "max_tokens": max_tokens})
    geometry = api.stage.geometry
    frames = _noting_arrivals(api.stream_frames(request, uuid.uuid4().hex),
                              geometry.first_chunk_frames + geometry.right_holdback_frames, start, marks)
    async for chunk in api.stage.stream(frames):
        if first is None:
            first = time.perf_counter() - start
        samples += chunk.numel()
    wall = time.perf_counter() - start
    audio = samples / api.stage.codec.sample_rate
    window = marks.get("window_s", first)  # a stream shorter than the first window: its first chunk
    return {"ttfa_s": first, "wall_s": wall, "audio_s": audio, "rtf": wall / audio,
            "first_rows_s": marks.get("first_rows_s"), "window_s": window}


async def level(api: SpeechAPI, concurrency: int, rounds: int, max_tokens: int) -> dict:
    per_stream, audio_total, wall_total, per_round = [], 0.0, 0.0, []
    api.stage.record.batches.clear()
    for _ in range(rounds):
        start = time.perf_counter()
        results = await asyncio.gather(*[_one(api, max_tokens) for _ in range(concurrency)])
        wall = time.perf_counter() - start
        wall_total += wall
        audio_total += sum(r["audio_s"] for r in results)
        per_stream += results
        per_round.append({"ttfa_ms_median": 1000 * statistics.median(r["ttfa_s"] for r in results),
                          "audio_s_per_s": sum(r["audio_s"] for r in results) / wall})
    return {
        "concurrency": concurrency,
        "streams": len(per_stream),
        "ttfa_ms_median": 1000 * statistics.median(r["ttfa_s"] for r in per_stream),
        # TTFA's parts: the engine's first audio rows, and the first codec window's frames all in
        "first_rows_ms_median": 1000 * statistics.median(r["first_rows_s"] for r in per_stream),
        "window_ms_median": 1000 * statistics.median(r["window_s"] for r in per_stream),
        "rtf_median": statistics.median(r["rtf"] for r in per_stream),
        "audio_s_per_s": audio_total / wall_total,
        "audio_s_per_stream": statistics.median(r["audio_s"] for r in per_stream),
        "codec_batches": dict(sorted(api.stage.record.batches.items())),  # batch size -> decodes
        "rounds": per_round,  # each round's TTFA median and audio s/s: the gate's tolerance is their spread
    }
