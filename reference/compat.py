"""Where vLLM 0.26 (the GPU machine) and 0.32 (this CPU machine) differ, and nowhere else.

Each function names the difference it hides; tests/test_compat.py checks them on the installed
vLLM, and the GPU run exercises the 0.26 side.
"""

from __future__ import annotations

import dataclasses
import inspect

import vllm
from vllm import SamplingParams


def vllm_version() -> tuple[int, int]:
    major, minor, *_ = vllm.__version__.split(".")
    return int(major), int(minor)


def sampling_params_fields() -> tuple[str, ...]:
    """SamplingParams field names (a msgspec Struct in both versions; a dataclass in older ones)."""
    fields = getattr(SamplingParams, "__struct_fields__", None)
    return tuple(fields) if fields is not None else tuple(f.name for f in dataclasses.fields(SamplingParams))


def flat_logprobs_kwargs(num_logprobs: int) -> dict:
    """SamplingParams kwargs for `num_logprobs` per step in the flat format (duplicates kept)."""
    if "flat_logprobs" not in sampling_params_fields():
        raise RuntimeError(
            f"vLLM {vllm.__version__} has no SamplingParams.flat_logprobs, which the talker's code "
            "channel needs (duplicate codes must survive): use vLLM >= 0.26"
        )
    return {"logprobs": num_logprobs, "flat_logprobs": True}


def logprobs_tensors(token_ids, logprobs, ranks):
    from vllm.v1.outputs import LogprobsTensors

    return LogprobsTensors(logprob_token_ids=token_ids, logprobs=logprobs, selected_token_ranks=ranks)


def sampler_output(sampled_token_ids, logprobs_tensors):
    """The V1 sampler's return value."""
    from vllm.v1.outputs import SamplerOutput

    return SamplerOutput(sampled_token_ids=sampled_token_ids, logprobs_tensors=logprobs_tensors)


def sampling_wants_logprobs(sampling_metadata) -> bool:
    """True when some request of the V1 batch asked for logprobs (the talker's code channel)."""
    return getattr(sampling_metadata, "max_num_logprobs", None) is not None


def platform_worker_base() -> type:
    """vLLM's worker class for this platform (CPU or CUDA)."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        from vllm.v1.worker.cpu_worker import CPUWorker

        return CPUWorker
    from vllm.v1.worker.gpu_worker import Worker

    return Worker


def runner_kind(model_runner) -> str:
    """'v2' for a Model Runner V2 instance (vllm.v1.worker.gpu / .cpu packages), else 'v1'."""
    module = type(model_runner).__module__
    for cls in type(model_runner).__mro__:
        if cls.__module__.startswith(("vllm.v1.worker.gpu.", "vllm.v1.worker.cpu.")):
            return "v2"
    return "v2" if module.startswith(("vllm.v1.worker.gpu.", "vllm.v1.worker.cpu.")) else "v1"


def accepts_kwarg(fn, name: str) -> bool:
    return name in inspect.signature(fn).parameters
