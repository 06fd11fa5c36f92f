"""What the launcher takes from the resolved talker stage (stage 0), and the warnings about it.

- `engine_kwargs`: every key of stage 0 that is not reserved (schema.RESERVED_STAGE_KEYS), with
  compilation_config.cudagraph_mode from the switches (NONE when eager; a mode the file sets is
  kept, with a warning where the switches say otherwise), no capture sizes when eager (sizes
  sorted otherwise), and hf_overrides[HF_OVERRIDES_KEY] = TalkerOptions.to_dict();
- `engine_env`: stage 0's env plus VLLM_USE_V2_MODEL_RUNNER "1" | "0", always set;
- `default_sampling`: stage 0's default_sampling_params, checked by reference/deploy/sampling.py
  one field at a time, so an error names the file that set the offending field;
- `attention_warnings`: a CUDA-only attention backend asked for on another platform.
All pure: the caller (resolve_deployment) logs the warnings once.
"""

from __future__ import annotations

from typing import Any, Mapping

from reference.deploy.loader import independent_copy
from reference.deploy.platform_matrix import vllm_env
from reference.deploy.sampling import validate_sampling_params
from reference.deploy.schema import RESERVED_STAGE_KEYS, TALKER_STAGE, DeployFileError
from reference.deploy.switches import HF_OVERRIDES_KEY, TalkerOptions, cudagraph_mode

# Attention backends with no build outside CUDA (upstream's own ROCm section says so for FlashInfer).
CUDA_ONLY_ATTENTION = ("FLASHINFER",)


def default_sampling(stage0: Mapping[str, Any], origins: Mapping[str, str], runner: str) -> dict[str, Any]:
    sampling: dict[str, Any] = {}
    for field_name, value in sorted((stage0.get("default_sampling_params") or {}).items()):
        key = f"stages.{TALKER_STAGE}.default_sampling_params.{field_name}"
        origin = origins.get(key) or next(o for k, o in origins.items() if k.startswith(key + "."))
        where = f"default_sampling_params in {origin}"
        sampling.update(validate_sampling_params({field_name: value}, runner, where=where))
    return sampling


def engine_kwargs(
    stage0: Mapping[str, Any], options: TalkerOptions, origins: Mapping[str, str]
) -> tuple[dict[str, Any], list[str]]:
    """(vLLM engine kwargs of the talker, warnings)."""
    kwargs = {k: independent_copy(v) for k, v in stage0.items() if k not in RESERVED_STAGE_KEYS}
    eager = bool(kwargs.get("enforce_eager", False))
    compilation = dict(kwargs.get("compilation_config") or {})
    derived = cudagraph_mode(options, eager)
    asked = compilation.get("cudagraph_mode")
    warnings = []
    if asked is not None and asked != derived:
        key = f"stages.{TALKER_STAGE}.compilation_config"
        warnings.append(
            f"{key}.cudagraph_mode: {asked} ({origins.get(key, '')}) differs from {derived}, the mode "
            f"{'enforce_eager: true sets' if eager else 'the feature switches set'} under Model Runner "
            f"{options.runner.upper()}; {'enforce_eager wins' if eager else 'the file value is used'}"
        )
    compilation["cudagraph_mode"] = asked if asked is not None and not eager else derived
    if eager:
        compilation.pop("cudagraph_capture_sizes", None)
    elif compilation.get("cudagraph_capture_sizes") is not None:
        compilation["cudagraph_capture_sizes"] = sorted(compilation["cudagraph_capture_sizes"])
    kwargs["compilation_config"] = compilation
    kwargs["hf_overrides"] = {**(kwargs.get("hf_overrides") or {}), HF_OVERRIDES_KEY: options.to_dict()}
    kwargs.setdefault("enforce_eager", eager)
    return kwargs, warnings


def engine_env(stage0: Mapping[str, Any], runner: str, origins: Mapping[str, str]) -> dict[str, str]:
    env = {str(k): str(v) for k, v in (stage0.get("env") or {}).items()}
    runner_env = vllm_env(runner)
    for key, value in runner_env.items():
        if key in env and env[key] != value:
            raise DeployFileError(
                f"{origins.get(f'stages.{TALKER_STAGE}.env', '')}: stages.{TALKER_STAGE}.env.{key}: {env[key]!r} "
                f"contradicts the resolved runner {runner} ({value!r}); remove it, model_runner decides"
            )
    return {**env, **runner_env}


def attention_warnings(stages: Mapping[int, Mapping[str, Any]], platform: str, origins: Mapping[str, str]) -> list[str]:
    if platform == "cuda":
        return []
    return [
        f"stages.{sid}.attention_backend: {stage['attention_backend']} "
        f"({origins.get(f'stages.{sid}.attention_backend', '')}) has no {platform} build; set another "
        f"backend in platforms.{platform}.stages (stage_id {sid})"
        for sid, stage in sorted(stages.items())
        if stage.get("attention_backend") in CUDA_ONLY_ATTENTION
    ]
