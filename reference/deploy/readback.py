"""What vLLM must build for a resolved deployment, and the check against what it built.

After an engine boots, every worker reports what its vLLM built, after vLLM's own resolution
(`TalkerWorker.talker_built_settings`, reference/compat.py `built_settings`); `check_build` compares
that with `expected_build(deployment, overrides)` and names every key that differs, with the
profile and both values. `python -m reference.deploy` prints the same keys for a resolved profile.

Where an expected value comes from, first match:
- the launch overrides (the extra engine arguments a caller passes beside the profile);
- stage 0 of the resolved file (its origin as resolve_deployment recorded it);
- what the launcher itself decides: the runner, cudagraph_mode and the sampling step's graphs
  from the feature switches, no capture sizes and no compilation when eager, enforce_eager false
  and seed 0 when unset, no attention backend asked when the file names none;
- what the platform builds: the CPU has one attention backend, CPU_ATTN;
- otherwise the key is vLLM's default: printed, not compared (`Expected.compared` false).
The expected graphs follow from the expected mode, sizes and max_num_seqs: FULL decode graphs for
every capture size a decode batch reaches (<= max_num_seqs), piecewise graphs for every size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from reference.deploy.schema import TALKER_STAGE
from reference.deploy.switches import cudagraph_mode
from reference.talker.engine import TALKER_ENGINE_ARGS

# The keys, in print order, and what each one reads in the worker (reference/compat.py).
READBACK_KEYS: dict[str, str] = {
    "runner": "Model Runner V1 or V2, the class vLLM built",
    "compilation_mode": "compilation_config.mode (torch.compile level)",
    "cudagraph_mode": "compilation_config.cudagraph_mode after vLLM resolved it",
    "cudagraph_capture_sizes": "compilation_config.cudagraph_capture_sizes after vLLM filtered them",
    "full_cudagraphs": "token counts of the FULL CUDA graphs captured",
    "piecewise_cudagraphs": "token counts of the PIECEWISE CUDA graphs captured",
    "sampler_cudagraphs": "the talker's sampling step replays CUDA graphs (reference/talker/step_graphs.py)",
    "max_num_seqs": "scheduler_config.max_num_seqs",
    "max_model_len": "model_config.max_model_len",
    "max_num_batched_tokens": "scheduler_config.max_num_batched_tokens",
    "stream_interval": "scheduler_config.stream_interval (talker steps per output a request gets)",
    "async_scheduling": "scheduler_config.async_scheduling",
    "enable_chunked_prefill": "scheduler_config.enable_chunked_prefill",
    "enable_prefix_caching": "cache_config.enable_prefix_caching",
    "block_size": "cache_config.block_size",
    "attention_backend": "attention_config.backend: the backend asked for (null: vLLM chooses)",
    "attention_backend_built": "the backend class of the attention layers",
    "kv_cache_dtype": "cache_config.cache_dtype",
    "dtype": "model_config.dtype: the talker's weights and activations",
    "enforce_eager": "model_config.enforce_eager",
    "seed": "model_config.seed",
    "tensor_parallel_size": "parallel_config.tensor_parallel_size",
    "data_parallel_size": "parallel_config.data_parallel_size",
}
# Keys read from stage 0 under the same name (an engine argument of that name).
_ENGINE_ARG_KEYS = (
    "max_num_seqs", "max_model_len", "max_num_batched_tokens", "stream_interval", "async_scheduling",
    "enable_chunked_prefill",
    "enable_prefix_caching", "block_size", "kv_cache_dtype", "tensor_parallel_size", "data_parallel_size",
)
# vLLM's other names of a dtype, as torch names it.
DTYPE_ALIASES = {"half": "float16", "float": "float32"}
# Values that name an enum member in vLLM (compared by name, upper case).
_ENUM_KEYS = ("compilation_mode", "cudagraph_mode", "attention_backend", "attention_backend_built")
# vLLM's CompilationMode by number (a file may write the number); the same in 0.26 and 0.32.
COMPILATION_MODES = {0: "NONE", 1: "STOCK_TORCH_COMPILE", 2: "DYNAMO_TRACE_ONCE", 3: "VLLM_COMPILE"}
# The platform's own choice where the file names none.
PLATFORM_ATTENTION_BACKEND = {"cpu": "CPU_ATTN"}
LAUNCHER = "the launcher (reference/talker/engine.py)"
VLLM_DEFAULT = "vLLM default"


@dataclass(frozen=True)
class Expected:
    value: Any
    origin: str  # where the value comes from
    compared: bool = True  # False: left to vLLM, printed but not compared


class BuildMismatch(AssertionError):
    """vLLM built something other than the resolved profile asks for."""


def expected_build(deployment, overrides: Mapping[str, Any] | None = None) -> dict[str, Expected]:
    """Every READBACK_KEYS key for `deployment` (resolve_deployment's result) started with `overrides`
    (extra engine arguments, as given to start_llm_for_deployment)."""
    overrides = dict(overrides or {})
    stage = deployment.config["stages"][TALKER_STAGE]
    prefix = f"stages.{TALKER_STAGE}"

    def given(name: str) -> Expected | None:
        if name in overrides:
            return Expected(overrides[name], "launch override")
        if name in stage:
            return Expected(stage[name], deployment.origins.get(f"{prefix}.{name}", deployment.profile))
        return None

    out: dict[str, Expected] = {"runner": Expected(deployment.runner, deployment.origins["runner"])}
    eager = given("enforce_eager") or Expected(False, f"{LAUNCHER}: enforce_eager unset")
    eager_origin = f"enforce_eager: true ({eager.origin})"
    compilation = given("compilation_config") or Expected({}, VLLM_DEFAULT)
    settings = compilation.value or {}

    mode = settings.get("mode")
    if eager.value:
        out["compilation_mode"] = Expected("NONE", eager_origin)
    elif mode is not None:
        out["compilation_mode"] = Expected(COMPILATION_MODES.get(mode, mode), compilation.origin)
    else:
        out["compilation_mode"] = Expected(None, VLLM_DEFAULT, compared=False)

    if eager.value:
        out["cudagraph_mode"] = Expected("NONE", eager_origin)
    elif settings.get("cudagraph_mode") is not None:
        out["cudagraph_mode"] = Expected(settings["cudagraph_mode"], compilation.origin)
    else:
        switch = deployment.origins.get("options.full_decode_cudagraphs", "")
        origin = f"features.full_decode_cudagraphs: {str(deployment.options.full_decode_cudagraphs).lower()} ({switch})"
        out["cudagraph_mode"] = Expected(cudagraph_mode(deployment.options, False), origin)

    sizes = settings.get("cudagraph_capture_sizes")
    if eager.value:
        out["cudagraph_capture_sizes"] = Expected([], eager_origin)
    elif sizes is not None:
        out["cudagraph_capture_sizes"] = Expected(sorted(set(sizes)), compilation.origin)
    else:
        out["cudagraph_capture_sizes"] = Expected(None, VLLM_DEFAULT, compared=False)

    for name in _ENGINE_ARG_KEYS:
        out[name] = given(name) or Expected(None, VLLM_DEFAULT, compared=False)

    out["full_cudagraphs"], out["piecewise_cudagraphs"] = _expected_graphs(
        out["cudagraph_mode"], out["cudagraph_capture_sizes"], out["max_num_seqs"]
    )

    if eager.value:
        out["sampler_cudagraphs"] = Expected(False, eager_origin)
    else:
        switch = deployment.origins.get("options.sampler_cudagraphs", "")
        wanted = deployment.options.sampler_cudagraphs
        out["sampler_cudagraphs"] = Expected(wanted, f"features.sampler_cudagraphs: {str(wanted).lower()} ({switch})")

    asked = given("attention_backend")
    out["attention_backend"] = asked or Expected(None, f"{LAUNCHER}: the file names no attention backend")
    if asked is not None:
        out["attention_backend_built"] = asked
    elif deployment.platform in PLATFORM_ATTENTION_BACKEND:
        out["attention_backend_built"] = Expected(
            PLATFORM_ATTENTION_BACKEND[deployment.platform], f"platform {deployment.platform}: its only backend"
        )
    else:
        out["attention_backend_built"] = Expected(None, VLLM_DEFAULT, compared=False)

    out["enforce_eager"] = eager
    dtype = given("dtype")
    if dtype is None or dtype.value == "auto":  # vLLM's choice, by the checkpoint and the platform
        out["dtype"] = Expected(None if dtype is None else "auto", VLLM_DEFAULT if dtype is None else dtype.origin,
                                compared=False)
    else:
        out["dtype"] = Expected(DTYPE_ALIASES.get(dtype.value, dtype.value), dtype.origin)
    out["seed"] = given("seed") or Expected(TALKER_ENGINE_ARGS["seed"], f"{LAUNCHER}: TALKER_ENGINE_ARGS")
    for name in _ENUM_KEYS:
        found = out[name]
        if isinstance(found.value, str):
            out[name] = Expected(found.value.upper(), found.origin, found.compared)
    return {key: out[key] for key in READBACK_KEYS}


def _expected_graphs(mode: Expected, sizes: Expected, max_num_seqs: Expected) -> tuple[Expected, Expected]:
    """(FULL, PIECEWISE) token counts the mode and sizes ask for; not compared when one is vLLM's."""
    if mode.value == "NONE" or (mode.compared and sizes.value == []):
        return Expected([], mode.origin), Expected([], mode.origin)
    if not (mode.compared and sizes.compared):
        return Expected(None, VLLM_DEFAULT, compared=False), Expected(None, VLLM_DEFAULT, compared=False)
    name = str(mode.value).upper()
    origin = f"cudagraph_mode {name}, capture sizes {sizes.value}"
    piecewise = Expected(list(sizes.value) if "PIECEWISE" in name else [], origin)
    if name == "FULL":  # mixed batches in FULL graphs too: every size
        return Expected(list(sizes.value), origin), piecewise
    if name.startswith("FULL_"):  # FULL graphs for uniform decode batches only
        if not max_num_seqs.compared:
            return Expected(None, VLLM_DEFAULT, compared=False), piecewise
        reach = [s for s in sizes.value if s <= max_num_seqs.value]
        return Expected(reach, f"{origin}, decode batches up to max_num_seqs {max_num_seqs.value}"), piecewise
    return Expected([], origin), piecewise


def mismatches(expected: Mapping[str, Expected], built: Sequence[Mapping[str, Any]], where: str) -> list[str]:
    """One line per key and worker where the build differs from a compared expectation.

    where: the profile and platform, e.g. "reference/deploy/profiles/default.yaml on cpu"."""
    problems = []
    for rank, settings in enumerate(built):
        worker = f" (worker {rank})" if len(built) > 1 else ""
        for key, want in expected.items():
            if key not in settings:
                problems.append(f"{where}: {key}: vLLM reported no value{worker}; the worker lacks this key")
                continue
            if want.compared and settings[key] != want.value:
                problems.append(
                    f"{where}: {key}: vLLM built {settings[key]!r}{worker}, "
                    f"the profile resolved {want.value!r} ({want.origin})"
                )
    return problems


def check_build(deployment, built: Sequence[Mapping[str, Any]], overrides: Mapping[str, Any] | None = None) -> None:
    """Raises BuildMismatch naming every key where `built` (one dict per worker,
    reference/talker/engine.py built_settings) differs from what `deployment` asks for."""
    where = f"{deployment.profile} on {deployment.platform}"
    if not built:
        raise BuildMismatch(f"{where}: no worker reported what it built")
    problems = mismatches(expected_build(deployment, overrides), built, where)
    if problems:  # one line per key, the first one first (a test report shows it)
        raise BuildMismatch("\n".join(problems))
