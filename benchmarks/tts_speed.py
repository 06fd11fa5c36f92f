"""Speed of the talker + codec under Model Runner V1 and V2, in one run (a benchmark, not a test).

    python -m benchmarks.tts_speed [--size 4b] [--concurrency 1 4 16] [--out results.json]

Each runner boots from its deployment profile for this platform (V2: the default profile; V1:
the high-throughput opt-out profile, eager, 32 sequences; `--v1-profile low_latency` for the
other), on a dummy checkpoint of the real shapes whose requests never
emit EOC (flavour "no_eoc"), so every request makes exactly `--max-tokens` rows. Per
concurrency level, `c` streams run at once, `--rounds` times:
- TTFA: request submitted -> first PCM chunk out of the streaming decoder (the profile's geometry:
  V2 waits for an 8-frame window plus holdback, V1 for one frame plus holdback);
- RTF: a request's wall time / its audio duration;
- audio s/s: all audio seconds produced at that level / the level's wall time.
Medians are reported. The codec decodes on the device of the profile's code2wav stage (stage 1),
in the engine's code2wav stage (reference/codec/stage.py): the chunks of all streams batched up
to stage 1's max_num_seqs, the connector's max_inflight_chunks per stream; each level reports the
stage's batch sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid

import torch

from higgs_dummy.cache import cached_checkpoint
from reference.codec.model import load_codec
from reference.codec.stage import CodecStage
from reference.deploy.resolve import resolve_deployment
from reference.talker.engine import deployment_engine_kwargs, stage_device, start_async_llm
from reference.speech import SpeechAPI, SpeechRequest

PROFILES = {"v2": "default", "v1": "high_throughput"}
TEXT = "Model Runner V2 keeps the talker state on the device and streams audio in codec windows."


async def _one(api: SpeechAPI, max_tokens: int) -> dict:
    start = time.perf_counter()
    first, samples = None, 0
    request = SpeechRequest(TEXT, sampling={"temperature": 0.0, "max_tokens": max_tokens})
    async for chunk in api.stream_audio(request, uuid.uuid4().hex):
        if first is None:
            first = time.perf_counter() - start
        samples += chunk.numel()
    wall = time.perf_counter() - start
    audio = samples / api.stage.codec.sample_rate
    return {"ttfa_s": first, "wall_s": wall, "audio_s": audio, "rtf": wall / audio}


async def _level(api, concurrency: int, rounds: int, max_tokens: int) -> dict:
    per_request, audio_total, wall_total = [], 0.0, 0.0
    api.stage.record.batches.clear()
    for _ in range(rounds):
        start = time.perf_counter()
        results = await asyncio.gather(*[_one(api, max_tokens) for _ in range(concurrency)])
        wall_total += time.perf_counter() - start
        audio_total += sum(r["audio_s"] for r in results)
        per_request += results
    return {
        "concurrency": concurrency,
        "requests": len(per_request),
        "ttfa_ms_median": 1000 * statistics.median(r["ttfa_s"] for r in per_request),
        "rtf_median": statistics.median(r["rtf"] for r in per_request),
        "audio_s_per_s": audio_total / wall_total,
        "audio_s_per_request": statistics.median(r["audio_s"] for r in per_request),
        "codec_batches": dict(sorted(api.stage.record.batches.items())),  # batch size -> decodes
    }


def bench_runner(runner: str, args, platform: str) -> dict:
    checkpoint = cached_checkpoint(args.size, 0, "no_eoc")
    overrides = {  # keys of the deploy file: the engine arguments come from its resolved stage 0
        "stages.0.max_model_len": args.max_tokens + 256,
        "stages.0.gpu_memory_utilization": args.gpu_memory_utilization,
    }
    deployment = resolve_deployment(PROFILES[runner], platform, overrides)
    if deployment.runner != runner:
        raise SystemExit(f"profile {PROFILES[runner]} resolves to {deployment.runner} on {platform}, not {runner}")
    kwargs = deployment_engine_kwargs(deployment)
    boot = time.perf_counter()
    engine = start_async_llm(checkpoint, runner, **kwargs)
    boot = time.perf_counter() - boot
    codec = load_codec(checkpoint, device=stage_device(deployment, deployment.codec_stage))  # stage 1's device
    stage = CodecStage.from_deployment(deployment, codec)
    api = SpeechAPI(engine, checkpoint, runner, stage=stage)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(_level(api, 2, 1, 32))  # warm-up
        levels = [
            loop.run_until_complete(_level(api, c, args.rounds, args.max_tokens))
            for c in args.concurrency
        ]
    finally:
        engine.shutdown()
        loop.run_until_complete(asyncio.sleep(0.1))  # let the engine's output task see its cancellation
        loop.close()
    return {"runner": runner, "profile": deployment.profile, "geometry": deployment.geometry.__dict__,
            "codec_stage": deployment.codec_stage, "boot_s": boot, "levels": levels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="4b")
    parser.add_argument("--runners", nargs="+", default=["v1", "v2"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=257, help="rows per request (250 frames = 10 s)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--v1-profile", default=PROFILES["v1"])
    parser.add_argument("--out")
    args = parser.parse_args()
    PROFILES["v1"] = args.v1_profile
    platform = "cuda" if torch.cuda.is_available() else "cpu"
    results = {"platform": platform, "size": args.size, "max_tokens": args.max_tokens,
               "runs": [bench_runner(r, args, platform) for r in args.runners]}
    print(f"{'runner':6} {'c':>3} {'TTFA ms':>8} {'RTF':>6} {'audio s/s':>9}")
    for run in results["runs"]:
        for lvl in run["levels"]:
            print(f"{run['runner']:6} {lvl['concurrency']:>3} {lvl['ttfa_ms_median']:>8.1f} "
                  f"{lvl['rtf_median']:>6.3f} {lvl['audio_s_per_s']:>9.1f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
