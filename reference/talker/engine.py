"""Starting vLLM engines for the talker, with the runner chosen explicitly.

`VLLM_USE_V2_MODEL_RUNNER` is always set ("1" for V2, "0" for V1): unset, vLLM picks a runner by
itself (and on 0.26 silently falls back to V1 for some settings); the talker's worker then checks
that the runner vLLM built is the one asked for.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
TALKER_ENGINE_ARGS = {
    "skip_tokenizer_init": True,  # the speech API tokenizes; the engine only sees token ids
    "worker_cls": "reference.talker.worker.TalkerWorker",
    "seed": 0,
}


def engine_kwargs(checkpoint: str | Path, runner: str, **overrides) -> dict:
    """The engine arguments of a talker under `runner`, which is also made explicit in the
    environment; the talker is registered with vLLM here too, for checkouts not installed."""
    from reference import compat
    from reference.talker.plugin import register

    if runner not in ("v1", "v2"):
        raise ValueError(f"runner must be 'v1' or 'v2', got {runner!r}")
    compat.check_supported_version()  # a vLLM nobody ran the suite on fails here, by name
    register()
    os.environ[RUNNER_ENV] = "1" if runner == "v2" else "0"
    return {"model": str(checkpoint), **TALKER_ENGINE_ARGS, **overrides}


def start_llm(checkpoint: str | Path, runner: str, **overrides):
    """A synchronous `vllm.LLM` running the talker under `runner` ('v1' or 'v2')."""
    from vllm import LLM

    return LLM(**engine_kwargs(checkpoint, runner, **overrides))


def start_async_llm(checkpoint: str | Path, runner: str, **overrides):
    """A `vllm.v1.engine.async_llm.AsyncLLM` (engine core in its own process). On a CPU its KV cache
    is sized by reference/talker/kv_cache.py, which logs the size and why, before the engine starts."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import current_platform
    from vllm.v1.engine.async_llm import AsyncLLM

    from reference.talker import kv_cache

    args = AsyncEngineArgs(**engine_kwargs(checkpoint, runner, **overrides))
    if not current_platform.is_cpu():
        return AsyncLLM.from_engine_args(args)
    kv_cache.space_gib()  # a bad VLLM_CPU_KVCACHE_SPACE, named before vLLM's int() reads it
    config = args.create_engine_config()
    logging.getLogger("higgs_ref.talker").info(kv_cache.reserve(config))
    return AsyncLLM.from_vllm_config(config, enable_log_requests=args.enable_log_requests,
                                     disable_log_stats=args.disable_log_stats)


def deployment_engine_kwargs(deployment, **overrides) -> dict:
    """vLLM engine arguments of a resolved deployment (reference/deploy/resolve.py: stage 0 of the
    deploy file), with its environment (the runner it chose, explicit) set."""
    os.environ.update(deployment.env)
    return {**deployment.engine_kwargs, **overrides}


# The torch device type of each platform's accelerator (torch names ROCm devices cuda:N).
_TORCH_DEVICE = {"cuda": "cuda", "rocm": "cuda", "npu": "npu", "xpu": "xpu", "musa": "musa", "cpu": "cpu"}


def stage_device(deployment, stage: dict | None) -> str:
    """The torch device of a resolved stage (e.g. deployment.codec_stage): the first id of its
    `devices` ("0", "0,1") on the platform's accelerator; "cpu" on a CPU."""
    kind = _TORCH_DEVICE[deployment.platform]
    if kind == "cpu":
        return "cpu"
    first = str((stage or {}).get("devices", "0")).split(",")[0].strip() or "0"
    if not first.isdigit():
        raise ValueError(f"{deployment.profile}: stages.{(stage or {}).get('stage_id')}.devices: {first!r} is not a device id")
    return f"{kind}:{first}"


def start_llm_for_deployment(checkpoint: str | Path, deployment, **overrides):
    """`vllm.LLM` for a resolved deployment profile; `overrides` win over the profile."""
    return start_llm(checkpoint, deployment.runner, **deployment_engine_kwargs(deployment, **overrides))


def built_runners(llm) -> list[str]:
    """The runner each worker really built ('v1'/'v2'), asked from the workers themselves."""
    return list(llm.collective_rpc("talker_runner_kind"))


def built_settings(llm) -> list[dict]:
    """What each worker's vLLM built (reference/deploy/readback.py names the keys), asked from the
    workers themselves, one dict per worker."""
    return list(llm.collective_rpc("talker_built_settings"))
