"""One phase in its own process: boot one engine, run its measurements, report as it goes.

`run_phase` is the target of the child that isolation.py spawns. The child first becomes the
leader of a new process group, so that the parent can kill it together with every process vLLM
starts under it (the engine core and its workers), and sends its stdout and stderr (vLLM's logs)
to the phase's log file: the terminal gets only the progress lines that the parent prints.

Messages on the phase's own pipe (a `multiprocessing` Connection) are (kind, payload):
- "progress": a line for the terminal, also kept as the phase's last progress line;
- "info": facts about the engine, merged into the phase's record (boot_s, versions, device, ...);
- "e2e" / "engine": one finished level, appended at once (a phase killed later keeps them);
- "done": all measured (sent before the engine's shutdown, and again when the child is through);
- "error": the traceback of the exception that ended the phase.
"""

from __future__ import annotations

import asyncio
import os
import platform
import sys
import tempfile
import time
import traceback

from benchmarks.plan import SAMPLINGS, Phase, Settings


def run_phase(phase: Phase, settings: Settings, checkpoint: str, gpu: str | None, log_path: str, channel,
              measure=None) -> None:
    """The child's whole life. `measure(phase, settings, checkpoint, send)`: a coroutine function,
    `measure_phase` unless a test gives a stand-in."""
    os.setsid()
    log = open(log_path, "a", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    if gpu is not None:  # before anything touches CUDA in this process or its children
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"  # never fork an engine (docs/vllm-findings.md)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache for a CPU engine

    def send(kind: str, payload) -> None:
        channel.send((kind, payload))  # synchronous: nothing is left in a buffer when the process ends

    try:
        asyncio.run((measure or measure_phase)(phase, settings, checkpoint, send))
        send("done", None)
    except BaseException:
        trace = traceback.format_exc()
        print(trace, file=sys.stderr, flush=True)
        send("error", trace)
        raise SystemExit(1)
    finally:
        channel.close()


async def measure_phase(phase: Phase, settings: Settings, checkpoint: str, send) -> None:
    # Imported here, in the child: the parent never imports vLLM's engine or touches the device.
    import torch
    import vllm

    from benchmarks import engine_steps, streams
    from benchmarks.admission import AdmissionTimes
    from benchmarks.bare_qwen3 import bare_engine_kwargs, bare_requests, start_bare_async_llm
    from reference.codec.model import load_codec
    from reference.codec.stage import CodecStage
    from reference.deploy.resolve import resolve_deployment
    from reference.speech import SpeechAPI
    from reference.talker.engine import deployment_engine_kwargs, stage_device, start_async_llm

    deployment = resolve_deployment(phase.profile, settings.platform, phase.overrides)
    send("progress", f"booting the {phase.kind} engine (Model Runner {deployment.runner.upper()}, {deployment.profile})")
    with tempfile.TemporaryDirectory(prefix="bare-qwen3-") as folder:
        start = time.perf_counter()
        if phase.kind == "talker":
            kwargs = deployment_engine_kwargs(deployment)
            engine = start_async_llm(checkpoint, deployment.runner, **kwargs)
            codec = load_codec(checkpoint, device=stage_device(deployment, deployment.codec_stage))
            api = SpeechAPI(AdmissionTimes(engine), checkpoint, deployment.runner,
                            stage=CodecStage.from_deployment(deployment, codec))
            make = engine_steps.talker_requests(api)
        else:
            kwargs = bare_engine_kwargs(deployment)
            engine, _ = start_bare_async_llm(checkpoint, folder, **kwargs)
            make = bare_requests(list(engine_steps.talker_prompt(checkpoint).token_ids))
        boot = time.perf_counter() - start
        send("info", {
            "boot_s": boot, "runner": deployment.runner, "profile_path": deployment.profile,
            "engine_kwargs": {k: v for k, v in kwargs.items() if k != "hf_overrides"},
            "geometry": deployment.geometry.__dict__ if phase.kind == "talker" else None,
            "vllm_version": vllm.__version__, "torch_version": torch.__version__,
            "device": _device_name(settings.platform, torch),
        })
        send("progress", f"engine booted in {boot:.0f} s")
        try:
            if phase.e2e_levels:
                voice = streams.named_voice(checkpoint, settings.voice_seconds)
                api.stage.warm()  # as the server warms it at its start (reference/serve/__main__.py)
                await streams.level(api, 2, 1, 32, voice)  # warm-up
                for c in phase.e2e_levels:
                    result = await streams.level(api, c, settings.rounds, settings.max_tokens, voice)
                    send("e2e", result)
                    split = ", ".join(f"{part} {ms:.0f}" for part, ms in result["split_ms"].items())
                    send("progress", f"e2e c={c} done: TTFA {result['ttfa_ms_median']:.0f} ms ({split}), "
                                     f"RTF {result['rtf_median']:.3f}, {result['audio_s_per_s']:.1f} audio s/s")
            for sampling, c in phase.engine_levels:
                result = await engine_steps.ms_per_step(engine, make, sampling, SAMPLINGS[sampling], c,
                                                         settings.engine_steps, settings.engine_repeats)
                send("engine", result)
                send("progress", f"engine-only {sampling} c={c} done: {result['ms_per_step']:.2f} ms/step")
            send("done", None)  # before the shutdown, which isolation.py bounds by GRACE_S
        finally:
            engine.shutdown()
            await asyncio.sleep(0.1)  # let the engine's output task see its cancellation


def _device_name(platform_name: str, torch) -> str:
    if platform_name == "cuda":
        return torch.cuda.get_device_name(0)
    return f"CPU {platform.processor() or platform.machine()}, {os.cpu_count()} cores"
