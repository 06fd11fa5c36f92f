"""End to end: streams through the speech API, from text to PCM, per concurrency level.

Per level, `c` streams run at once, `rounds` times, each through `SpeechAPI.stream_audio` (the
public streaming API, so whatever runs behind it, e.g. a batching code2wav stage, is measured as
it ships), greedy, on the no_eoc checkpoint, so every stream makes exactly `max_tokens` rows:
- TTFA: request submitted -> first PCM chunk out (the profile's geometry: an 8-frame window plus
  holdback under the V2 default, one frame plus holdback under the V1 profiles);
- RTF: a stream's wall time / its audio duration;
- audio s/s: all audio seconds produced in a round / the round's wall time.
A round's TTFA and RTF are medians over its streams; the level reports the median of its rounds
and their spread (spread.py). The chunks come from the engine's code2wav stage
(reference/codec/stage.py, built from the profile); each level reports the stage's batch sizes.

TTFA is split in five (spread.SPLIT): the engine core admits the request and its outputs carry the
first token (vLLM's own scheduling and first-token instants: admission.py, so the speech API's
engine must be an `AdmissionTimes`), the first rows reach the speech API (the way out of the
core), the frames of the first codec window with its holdback are all in (the delay pattern's
lead-in rows first), and the first PCM chunk is out (the code2wav stage and the streaming path). The stream is `stream_audio`'s own composition (the stage over `stream_frames`), with a
pass-through that notes the two arrivals. Every instant is `time.monotonic()`, the engine core's
clock.

With a named voice (`--voice-seconds S`), every stream clones one voice: S seconds of seeded
reference codes (10 s: 250 frames, 257 prompt slots), each stream with a text of its own, so that
the voice's prompt blocks are what requests can share through the prefix cache
(reference/talker/prompt_salt.py). The warm-up streams clone it too: the levels measure a voice
the server has served before. Its TTFA without sharing: the same run with
`--set stages.0.enable_prefix_caching=false`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
import uuid
from pathlib import Path

import numpy as np

from reference.speech import SpeechAPI, SpeechRequest

from benchmarks.engine_steps import TEXT
from benchmarks.spread import level_figures, round_figures, split_of


async def _noting_arrivals(frames, window: int, marks: dict):
    """Passes real frames [8, n] through; notes the first arrival and when `window` frames were in."""
    arrived = 0
    try:
        async for new in frames:
            arrived += new.shape[1]
            marks.setdefault("first_rows", time.monotonic())
            if arrived >= window:
                marks.setdefault("window_in", time.monotonic())
            yield new
    finally:
        await frames.aclose()  # aborts the request if the stream stopped early


VOICE_SEED = 21
_TAKES = itertools.count()  # a text of its own for every stream of a named voice


def named_voice(checkpoint: str | Path, seconds: float) -> list[list[int]] | None:
    """Seeded reference codes [8, frames] of `seconds` of audio at the checkpoint's frame rate
    (None for 0: zero-shot streams)."""
    if seconds <= 0:
        return None
    frame_rate = json.loads((Path(checkpoint) / "config.json").read_text())["frame_rate"]
    frames = round(seconds * frame_rate)
    return np.random.default_rng(VOICE_SEED).integers(0, 1024, size=(8, frames)).tolist()


async def _one(api: SpeechAPI, max_tokens: int, voice: list[list[int]] | None = None) -> dict:
    start = time.monotonic()
    first, samples, marks, request_id = None, 0, {}, uuid.uuid4().hex
    text = TEXT if voice is None else f"{TEXT} Take {next(_TAKES)}."
    request = SpeechRequest(text, ref_codes=voice, sampling={"temperature": 0.0, "max_tokens": max_tokens})
    geometry = api.stage.geometry
    frames = _noting_arrivals(api.stream_frames(request, request_id),
                              geometry.first_chunk_frames + geometry.right_holdback_frames, marks)
    async for chunk in api.stage.stream(frames):
        if first is None:
            first = time.monotonic()
        samples += chunk.numel()
    wall = time.monotonic() - start
    audio = samples / api.stage.codec.sample_rate
    window_in = marks.get("window_in", first)  # a stream shorter than the first window: its first chunk
    admitted, first_token = api.engine.scheduled.pop(request_id), api.engine.first_token.pop(request_id)
    return {"ttfa_s": first - start, "wall_s": wall, "audio_s": audio, "rtf": wall / audio,
            "split_s": split_of(start, admitted, first_token, marks["first_rows"], window_in, first)}


def prefix_cache_hits() -> int | None:
    """Prompt tokens vLLM read from its prefix cache so far (its process-wide Prometheus counter;
    None when the engine logs no stats)."""
    from vllm.v1.metrics.reader import get_metrics_snapshot

    values = [m.value for m in get_metrics_snapshot() if m.name == "vllm:prefix_cache_hits"]
    return int(sum(values)) if values else None


async def level(api: SpeechAPI, concurrency: int, rounds: int, max_tokens: int,
                voice: list[list[int]] | None = None) -> dict:
    per_round, audio = [], []
    hits_before = prefix_cache_hits()
    api.stage.record.batches.clear()
    api.stage.record.replayed = 0
    for _ in range(rounds):
        start = time.monotonic()
        results = await asyncio.gather(*[_one(api, max_tokens, voice) for _ in range(concurrency)])
        per_round.append(round_figures(results, time.monotonic() - start))
        audio += [r["audio_s"] for r in results]
    return {
        "concurrency": concurrency,
        "voice_frames": len(voice[0]) if voice else 0,  # 0: zero-shot
        "prefix_cache_hit_tokens": None if hits_before is None else prefix_cache_hits() - hits_before,
        "streams": len(audio),
        **level_figures(per_round),  # medians over the rounds, "split_ms", "spread"
        "audio_s_per_stream": statistics.median(audio),
        "codec_batches": dict(sorted(api.stage.record.batches.items())),  # batch size -> decodes
        "codec_replayed": api.stage.record.replayed,  # of those, replayed from a CUDA graph
        "rounds": per_round,  # each round's figures (the upgrade gate's tolerance is their spread)
    }
