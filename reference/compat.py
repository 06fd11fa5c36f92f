"""Where vLLM 0.26 (the GPU machine) and 0.32 (this CPU machine) differ, and nowhere else.

Each function names the difference it hides; tests/test_compat.py checks them on the installed
vLLM, and the GPU run exercises the 0.26 side.
"""

from __future__ import annotations

import dataclasses

import vllm
from vllm import SamplingParams


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


def v2_sampler_output(sampled_token_ids, logprobs_tensors, num_sampled, num_rejected):
    """The MRV2 sampler's return value: 0.26 and 0.32 both need num_sampled and num_rejected
    (0.32 makes them required fields; 0.26 reads num_rejected in post_update)."""
    from vllm.v1.worker.gpu.sample.output import SamplerOutput

    return SamplerOutput(
        sampled_token_ids=sampled_token_ids,
        logprobs_tensors=logprobs_tensors,
        num_nans=None,
        num_sampled=num_sampled,
        num_rejected=num_rejected,
    )


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
    """'v2' when the runner is Model Runner V2 (it lives in the vllm.v1.worker.gpu / .cpu packages;
    V1's runners are vllm.v1.worker.gpu_model_runner / cpu_model_runner), else 'v1'."""
    v2_packages = ("vllm.v1.worker.gpu.", "vllm.v1.worker.cpu.")
    return "v2" if any(c.__module__.startswith(v2_packages) for c in type(model_runner).__mro__) else "v1"


def full_cuda_graph_sizes(model_runner) -> list[int]:
    """Token counts of the FULL CUDA graphs Model Runner V2 captured (uniform decode batches up
    to the largest replay one of them; anything else runs piecewise or eager). Empty under V1 and
    when eager. Same internals in 0.26 and 0.32: `cudagraph_manager.graphs`, keyed by a
    descriptor with `cg_mode` and `num_tokens`."""
    manager = getattr(model_runner, "cudagraph_manager", None)
    graphs = getattr(manager, "graphs", None) or {}
    return sorted(desc.num_tokens for desc in graphs if desc.cg_mode.name == "FULL")
