"""Where the talker's decode step goes: one engine in this process under the torch profiler.

    python -m benchmarks.step_breakdown --runner v2 --profile default --concurrency 1 16 --out-dir DIR

The engine core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so the profiler sees
the scheduler, the runner, the talker's own code and the output path together. The talker's
pieces are wrapped in named profiler ranges (`talker.*`) for this run only. Per concurrency it
writes ms/step (decode wall time / steps, default sampling, seeded), the profiler's tables by
host time and by device time, and a gzipped Chrome trace. A microbenchmark of the sampler step
alone (`--micro`) times `talker_step` at several batch sizes, host and device.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import shutil
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")

import torch  # noqa: E402

SAMPLING = {"temperature": 1.0, "top_k": 50, "top_p": 0.95}


def _wrap(owner, name: str, label: str) -> None:
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def wrapped(*args, **kwargs):
        with torch.profiler.record_function(label):
            return inner(*args, **kwargs)

    setattr(owner, name, wrapped)


def label_talker() -> None:
    """Named ranges around the talker's pieces (this process only)."""
    from reference.talker import code_channel, model, runner_v1, runner_v2

    cls = model.HiggsMultimodalQwen3ForConditionalGeneration
    _wrap(cls, "compute_logits", "talker.compute_logits")
    _wrap(cls, "forward", "talker.forward")
    _wrap(runner_v2.TalkerModelState, "prepare_inputs", "talker.v2.prepare_inputs")
    _wrap(runner_v2.TalkerV2Sampler, "__call__", "talker.v2.sampler")
    _wrap(runner_v1.TalkerV1RunnerMixin, "_fill_token_codes", "talker.v1.fill_token_codes")
    _wrap(runner_v1.TalkerV1Sampler, "forward", "talker.v1.sampler")
    _wrap(code_channel, "encode", "talker.encode_codes")


def requests(count: int, steps: int):
    from reference.speech import SpeechRequest

    return [SpeechRequest("Where does the step go?", sampling={**SAMPLING, "seed": i, "max_tokens": steps})
            for i in range(count)]


def micro(device: str, sizes: list[int], iters: int, hidden_size: int = 2560) -> list[dict]:
    """The talker's own per-step work alone, on random inputs: the audio head (model.audio_logits,
    float32 as in the engine) then talker_step. Per batch: host time per call (launches), wall
    time, and on CUDA the device time of the same work replayed from one CUDA graph (what it costs
    the GPU without the launches), from CUDA events."""
    from types import SimpleNamespace

    from reference.codebooks import CODEBOOK_VOCAB, NUM_CODEBOOKS
    from reference.talker.model import HiggsMultimodalQwen3ForConditionalGeneration as Talker
    from reference.talker.step import talker_step

    weight = torch.randn(NUM_CODEBOOKS * CODEBOOK_VOCAB, hidden_size, device=device, dtype=torch.bfloat16)
    head = SimpleNamespace(audio_head=SimpleNamespace(weight=weight), tp_size=1)
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rows = []
    for b in sizes:
        hidden = torch.randn(b, hidden_size, device=device, dtype=torch.bfloat16)
        state = (
            torch.randint(0, 1024, (b, NUM_CODEBOOKS), device=device),
            torch.full((b,), 20, device=device),
            torch.full((b,), SAMPLING["temperature"], device=device),
            torch.full((b,), SAMPLING["top_k"], device=device),
            torch.full((b,), SAMPLING["top_p"], device=device),
            torch.arange(b, device=device),
        )

        def work():
            return talker_step(Talker.audio_logits(head, hidden), *state)

        for _ in range(5):
            work()
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            work()
        host = (time.perf_counter() - start) / iters
        sync()
        row = {"batch": b, "host_ms": 1000 * host, "wall_ms": 1000 * (time.perf_counter() - start) / iters}
        if cuda:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                work()  # warm-up on the capturing stream
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                work()
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(iters):
                graph.replay()
            end.record()
            sync()
            row["device_ms"] = begin.elapsed_time(end) / iters
        rows.append(row)
        print("micro audio head + talker_step B={batch}: host {host_ms:.3f} ms/call, wall {wall_ms:.3f} ms/call".format(**row)
              + (f", device {row['device_ms']:.3f} ms/call (CUDA graph)" if cuda else ""), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runner", choices=["v1", "v2"], default="v2")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--size", default="4b")
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--steps", type=int, default=200, help="decode steps timed per level")
    parser.add_argument("--profile-steps", type=int, default=30)
    parser.add_argument("--micro", action="store_true")
    parser.add_argument("--micro-only", action="store_true", help="the microbenchmark alone, no engine")
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results: dict = {"runner": args.runner, "profile": args.profile, "size": args.size}
    if args.micro or args.micro_only:
        results["micro"] = micro(device, [1, 16, 64], 200)
    if args.micro_only:
        (args.out_dir / "micro.json").write_text(json.dumps(results["micro"], indent=1))
        return

    from benchmarks.plan import batch_fit
    from higgs_dummy.cache import cached_checkpoint
    from reference.deploy.resolve import resolve_deployment
    from reference.speech import SpeechAPI
    from reference.talker.engine import deployment_engine_kwargs, start_llm

    label_talker()
    checkpoint = cached_checkpoint(args.size, 0, "no_eoc")
    platform = "cuda" if device == "cuda" else "cpu"
    overrides = {"stages.0.max_model_len": args.steps + 256, "stages.0.gpu_memory_utilization": 0.5}
    # the largest level decodes in one batch, in graphs where the profile captures them (as the benchmark's phases)
    overrides |= batch_fit(resolve_deployment(args.profile, platform, overrides).engine_kwargs, max(args.concurrency))
    deployment = resolve_deployment(args.profile, platform, overrides)
    boot = time.perf_counter()
    llm = start_llm(checkpoint, deployment.runner, **deployment_engine_kwargs(deployment))
    results["boot_s"] = time.perf_counter() - boot
    print(f"{deployment.runner} engine booted in {results['boot_s']:.0f} s", flush=True)
    api = SpeechAPI(llm, checkpoint, deployment.runner)
    results["levels"] = []
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    for c in args.concurrency:
        api.generate(requests(c, 16))  # warm-up
        start = time.perf_counter()
        api.generate(requests(c, args.steps))
        ms = 1000 * (time.perf_counter() - start) / args.steps
        print(f"c={c}: {ms:.2f} ms/step", flush=True)
        with torch.profiler.profile(activities=activities) as prof:
            api.generate(requests(c, args.profile_steps))
        stem = args.out_dir / f"{deployment.runner}-c{c}"
        table = prof.key_averages()
        text = [f"# {deployment.runner} c={c}: {ms:.2f} ms/step; profiled {args.profile_steps} steps\n"]
        text.append(table.table(sort_by="self_cpu_time_total", row_limit=45))
        if device == "cuda":
            text.append(table.table(sort_by="self_device_time_total", row_limit=30))
        stem.with_suffix(".txt").write_text("\n".join(text))
        trace = stem.with_suffix(".trace.json")
        prof.export_chrome_trace(str(trace))
        with open(trace, "rb") as src, gzip.open(f"{trace}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        trace.unlink()
        results["levels"].append({"concurrency": c, "ms_per_step": ms})
    (args.out_dir / f"{deployment.runner}-breakdown.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
