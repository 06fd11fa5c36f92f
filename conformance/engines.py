"""Talker engines for the conformance checks: one per (runner, engine config), reused by cases."""

from __future__ import annotations

import gc

import pytest

from conformance.environment import has_cuda
from fixtures.cache import cached_checkpoint
from reference.engine import built_runners, start_llm
from reference.speech import SpeechAPI

V2_ON_CPU_SKIP = (
    "Model Runner V2 needs Triton, which has no CPU backend here (the platform matrix pins V1 on CPU): "
    "run `tox -e gpu` on a CUDA machine for the V2 checks"
)


def platform_runners() -> list[str]:
    return ["v1", "v2"] if has_cuda() else ["v1"]


def runner_params(variants: dict[str, dict] | None = None) -> list:
    """pytest params for every runner variant; V2 on a CPU machine is a skip with its reason."""
    variants = variants or {"v1": {}, "v2": {}}
    available = platform_runners()
    return [
        pytest.param(name, marks=() if name.split("-")[0] in available else pytest.mark.skip(reason=V2_ON_CPU_SKIP))
        for name in variants
    ]


def platform_engine_args() -> dict:
    """Engine arguments every conformance engine gets on this platform.

    On CUDA: float32 FLEX_ATTENTION. vLLM's default float32 backend there, TRITON_ATTN, computes
    attention with TF32 tensor-core dot products (10-bit mantissa); on the H200 with vLLM 0.26 its
    streams left the oracle's goldens (fox: 55 rows for 45; long_text: row 73) identically under
    V1, V2 eager and V2 graphs, i.e. float error, not a runner defect. A small share of the GPU
    memory, so that several tiny engines fit at once.
    """
    if has_cuda():
        return {"attention_backend": "FLEX_ATTENTION", "gpu_memory_utilization": 0.1}
    return {}


class EnginePool:
    """Starts engines on first use and shuts them all down at the end of a module."""

    def __init__(self):
        self._engines: dict[tuple, SpeechAPI] = {}

    def get(self, runner: str, args: dict, checkpoint=None, **extra) -> SpeechAPI:
        key = (runner, tuple(sorted(args.items())), tuple(sorted(extra.items())))
        if key not in self._engines:
            self.close()  # one engine at a time: CPU memory and start-up are the limits
            checkpoint = checkpoint or cached_checkpoint("tiny", 0)
            kwargs = {**platform_engine_args(), **args, **extra}
            llm = start_llm(checkpoint, runner, dtype="float32", disable_log_stats=False, **kwargs)
            built = built_runners(llm)
            if set(built) != {runner}:
                raise AssertionError(f"asked for Model Runner {runner}, the workers built {built}")
            self._engines[key] = SpeechAPI(llm, checkpoint, runner)
        return self._engines[key]

    def close(self) -> None:
        for api in self._engines.values():
            api.engine.llm_engine.engine_core.shutdown()
        self._engines.clear()
        gc.collect()


def preemptions(api: SpeechAPI) -> int:
    for metric in api.engine.get_metrics():
        if metric.name == "vllm:num_preemptions":
            return int(metric.value)
    raise AssertionError("vLLM reported no vllm:num_preemptions metric (is disable_log_stats off?)")
