"""Deploy profiles: load a profile chain, apply a platform and overrides, resolve a deployment.

`resolve_deployment(profile, platform, overrides)` is the one entry point: it returns a frozen
`ResolvedDeployment` (runner, stream geometry, TalkerOptions, vLLM engine kwargs, env, validated
default sampling params, and the origin of every value) and logs its warnings exactly once.
Everything it calls is pure, so calling helpers again (or `TalkerOptions.from_dict` in each
worker) never repeats a warning.

Layers (a profile file's schema: reference/deploy/schema.py)
- Profile chain: a file may name `base_config`; the file overlays its base. Mappings merge key
  by key, `stages` merge by `stage_id`, `connectors` per connector name; scalars and lists
  replace. An overlay cannot delete: a null mapping or a null leaf over inherited values is an
  error (e.g. `platforms: {cpu: {codec: null}}` cannot clear an inherited platform restore).
- Platform section: `platforms.<platform>` of the merged chain, for the target platform. Its
  `stages` must name existing stage_ids and its `connectors` existing connectors.
- Overrides: a dict of dotted keys or nested mappings (`--set` in show_config), same schema,
  no `platforms`.
- YAML anchors and merge keys are allowed; every alias resolves to an independent copy, so
  mutating one resolved value never changes another that came from the same anchor.

Precedence: `PRECEDENCE`, an ordered first-match rule table, picks each key's value:
  1. override            the key is in the overrides
  2. first-chunk-switch  codec.first_chunk_frames when window_aligned_first_chunk resolved off
                         (an explicit false under V2, or any V1 run): 1 frame
  3. platform-section    the key is in platforms.<platform> (for codec.*: a *platform restore*)
  4. matrix-restore      codec.* when the platform matrix pinned V1 (prefer-v2 on a V1-only
                         platform): the upstream V1 geometry
  5. profile             the key is in the top level of the chain (the overlay's value over
                         its base's)
  6. runner-default      codec.*: DEFAULT_GEOMETRY under v2, UPSTREAM_V1 under v1
  7. schema-default      profile_schema.DEFAULTS
  No rule matches a REQUIRED key that no file sets: error.
So a platform restore beats top-level codec frames, even those set by an overlay, and an
overlay cannot clear an inherited restore (it can change it, inside its own platforms section).
model_runner is resolved first (rules 2, 4 and 6 do not apply to it), then the runner
(reference/deploy/platform_matrix.py), then the switches (reference/deploy/switches.py), then codec.
An explicit codec override beats the first-chunk switch (rule 1 before rule 2).

Runner on CPU (and ROCm, NPU, XPU, MUSA): the default profile says `model_runner: prefer-v2`,
so it boots V1 with the V1 geometry (rules platform-pins-v1 + matrix-restore); an explicit `v2`
(h200_v2.yaml, or `--set model_runner=v2`) fails at load naming the platform and the V1 profile.

Outputs: `engine_kwargs` = async_scheduling, max_num_seqs, max_model_len,
gpu_memory_utilization, enforce_eager, compilation_config {cudagraph_mode, and
cudagraph_capture_sizes unless eager}, hf_overrides {HF_OVERRIDES_KEY: TalkerOptions.to_dict()};
`env` = {"VLLM_USE_V2_MODEL_RUNNER": "1" | "0"}, always set. File loading and merging live in
reference/deploy/loader.py (re-exported here).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from reference.deploy.switches import (
    HF_OVERRIDES_KEY,
    SWITCH_NAMES,
    TalkerOptions,
    cudagraph_mode,
    first_chunk_frames,
    resolve_switches,
)
from reference.deploy.platform_matrix import RunnerChoice, check_platform, select_runner, vllm_env
from reference.deploy.loader import (
    PROFILES_DIR,
    Entry,
    independent_copy,
    display_path,
    load_chain,
    load_yaml,
    merge_chain,
    overrides_to_leaves,
    profile_path,
)
from reference.deploy.schema import CODEC_FIELDS, DEFAULTS, REQUIRED, Path_, dotted
from reference.deploy.sampling import validate_sampling_params
from reference.codec.geometry import DEFAULT_GEOMETRY, UPSTREAM_V1, StreamGeometry

logger = logging.getLogger("higgs_ref.deploy")

__all__ = [
    "PRECEDENCE",
    "PROFILES_DIR",
    "ResolvedDeployment",
    "Rule",
    "display_path",
    "load_chain",
    "load_yaml",
    "merge_chain",
    "overrides_to_leaves",
    "profile_path",
    "resolve_deployment",
]


# ---------------------------------------------------------------- precedence


@dataclass
class _Ctx:
    platform: str
    override: dict[Path_, Entry]
    platform_section: dict[Path_, Entry]
    profile: dict[Path_, Entry]
    choice: RunnerChoice | None = None
    options: TalkerOptions | None = None
    option_origins: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    name: str
    doc: str
    applies: Callable[[_Ctx, Path_], bool]
    pick: Callable[[_Ctx, Path_], Entry]


def _geometry_for(runner: str) -> StreamGeometry:
    return DEFAULT_GEOMETRY if runner == "v2" else UPSTREAM_V1


PRECEDENCE: tuple[Rule, ...] = (
    Rule("override", "overrides / --set", lambda c, p: p in c.override, lambda c, p: c.override[p]),
    Rule(
        "first-chunk-switch",
        "codec.first_chunk_frames when window_aligned_first_chunk resolved off (always under V1): 1 frame",
        lambda c, p: p == ("codec", "first_chunk_frames")
        and c.options is not None
        and not c.options.window_aligned_first_chunk,
        lambda c, p: (1, f"window_aligned_first_chunk off ({c.option_origins['window_aligned_first_chunk']})"),
    ),
    Rule(
        "platform-section",
        "platforms.<platform> of the profile chain (for codec.*: a platform restore)",
        lambda c, p: p in c.platform_section,
        lambda c, p: c.platform_section[p],
    ),
    Rule(
        "matrix-restore",
        "codec.* when the platform matrix pinned V1: the upstream V1 geometry",
        lambda c, p: p[0] == "codec" and c.choice is not None and c.choice.pinned,
        lambda c, p: (getattr(UPSTREAM_V1, p[1]), f"platform matrix: {c.platform} pins V1 (V1 geometry)"),
    ),
    Rule("profile", "top level of the profile chain", lambda c, p: p in c.profile, lambda c, p: c.profile[p]),
    Rule(
        "runner-default",
        "codec.*: the upstream geometry of the runner",
        lambda c, p: p[0] == "codec" and c.choice is not None,
        lambda c, p: (
            getattr(_geometry_for(c.choice.runner), p[1]),  # type: ignore[union-attr]
            f"runner default ({c.choice.runner})",  # type: ignore[union-attr]
        ),
    ),
    Rule(
        "schema-default",
        "profile_schema.DEFAULTS",
        lambda c, p: p in DEFAULTS,
        lambda c, p: (DEFAULTS[p], "default"),
    ),
)


def pick(ctx: _Ctx, path: Path_) -> tuple[Any, str, str] | None:
    """(value, origin, rule name) of the first matching rule, or None."""
    for rule in PRECEDENCE:
        if rule.applies(ctx, path):
            value, origin = rule.pick(ctx, path)
            return value, origin, rule.name
    return None


# ---------------------------------------------------------------- resolution


@dataclass(frozen=True)
class ResolvedDeployment:
    """Everything the launcher needs. Built fresh by each resolve_deployment call; treat as read-only."""

    profile: str  # display path of the profile file
    platform: str
    runner: str  # "v1" | "v2"
    runner_rule: str  # the platform_matrix rule that chose it
    geometry: StreamGeometry
    options: TalkerOptions
    engine_kwargs: dict[str, Any]  # for vllm.EngineArgs / vllm.LLM
    env: dict[str, str]  # set before vLLM starts
    default_sampling_params: dict[str, Any]
    stages: tuple[dict[str, Any], ...]  # sorted by stage_id
    connectors: dict[str, dict[str, Any]]
    config: dict[str, Any]  # the effective profile for this platform (nested)
    origins: dict[str, str]  # dotted key -> where its value came from
    warnings: tuple[str, ...]  # already logged once by resolve_deployment


def _nest(values: Mapping[Path_, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in sorted(values.items(), key=lambda kv: [str(p) for p in kv[0]]):
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = list(value) if isinstance(value, list) else value
    return out


def _async_v1_warning(origin: str) -> str:
    return (
        f"async_scheduling: true ({origin}) with Model Runner V1: V1 runs the next step on placeholder "
        "tokens before the talker's host-side state sees the sampled codes; set async_scheduling: false "
        "for V1, or use a V2 profile (reference/deploy/profiles/default.yaml) to keep async scheduling"
    )


def resolve_deployment(
    profile: str | Path, platform: str, overrides: Mapping[str, Any] | None = None
) -> ResolvedDeployment:
    """Resolve `profile` (a name in reference/deploy/profiles/ or a path) for `platform`, once per launch.

    Raises ValueError (RunnerUnavailable, SamplingParamsError) on any invalid combination.
    Logs each warning once on the "higgs_ref.deploy" logger.
    """
    check_platform(platform)
    merged = merge_chain(load_chain(profile))
    profile_name = display_path(profile_path(profile))
    prefix = ("platforms", platform)
    ctx = _Ctx(
        platform=platform,
        override={p: (v, "override") for p, v in overrides_to_leaves(overrides).items() if not _is_stage_key(p)},
        platform_section={
            p[2:]: (v, f"{o} platforms.{platform}")
            for p, (v, o) in merged.items()
            if p[:2] == prefix and not _is_stage_key(p[2:])
        },
        profile={p: e for p, e in merged.items() if p[0] != "platforms"},
    )
    _check_override_targets(ctx)
    values: dict[Path_, Any] = {}
    origins: dict[str, str] = {}

    def take(path: Path_) -> Any:
        found = pick(ctx, path)
        if found is None:
            raise ValueError(f"{profile_name}: required key {dotted(path)} is not set by the profile or its bases")
        values[path], origins[dotted(path)] = found[0], found[1]
        return found[0]

    requested = take(("model_runner",))
    ctx.choice = select_runner(requested, platform, origins["model_runner"])
    origins["runner"] = f"{ctx.choice.reason} (model_runner: {requested} from {origins['model_runner']})"

    keys = set(ctx.override) | set(ctx.platform_section) | set(ctx.profile) | set(DEFAULTS)
    for path in sorted(keys - {("model_runner",), ("base_config",), ("description",)}, key=dotted):
        if path[0] != "codec":
            take(path)
    for name in REQUIRED:
        if (name,) not in values:
            take((name,))

    switches = resolve_switches(
        {n: values.get(("features", n)) for n in SWITCH_NAMES},
        ctx.choice.runner,
        enforce_eager=values[("enforce_eager",)],
        origins={n: origins[f"features.{n}"] for n in SWITCH_NAMES},
    )
    ctx.options, ctx.option_origins = switches.options, switches.origins
    origins.update({f"options.{n}": o for n, o in switches.origins.items()})

    geometry = StreamGeometry(**{name: take(("codec", name)) for name in CODEC_FIELDS})
    if ctx.options.runner == "v2" and ctx.options.window_aligned_first_chunk:
        first_chunk_frames(ctx.options, geometry.first_chunk_frames)  # raises unless window-aligned

    sampling: dict[str, Any] = {}
    for path in sorted((p for p in values if p[0] == "default_sampling_params"), key=dotted):
        # One field at a time, so the error names the file that set the offending field.
        where = f"default_sampling_params in {origins[dotted(path)]}"
        sampling.update(validate_sampling_params({path[1]: values[path]}, ctx.choice.runner, where=where))

    warnings = list(switches.warnings)
    if ctx.choice.runner == "v1" and values[("async_scheduling",)]:
        warnings.append(_async_v1_warning(origins["async_scheduling"]))

    config = _nest(values)
    _check_topology(config, profile_name)
    stages = tuple(independent_copy(config.get("stages", {})[sid]) for sid in sorted(config.get("stages", {})))
    resolved = ResolvedDeployment(
        profile=profile_name,
        platform=platform,
        runner=ctx.choice.runner,
        runner_rule=ctx.choice.rule,
        geometry=geometry,
        options=ctx.options,
        engine_kwargs=_engine_kwargs(values, ctx.options),
        env=vllm_env(ctx.choice.runner),
        default_sampling_params=sampling,
        stages=stages,
        connectors=independent_copy(config.get("connectors", {})),
        config=config,
        origins=origins,
        warnings=tuple(warnings),
    )
    for message in resolved.warnings:  # the only place that logs: once per launch
        logger.warning(message)
    return resolved


def _is_stage_key(path: Path_) -> bool:
    # An override names its stage by stage_id; that is a key, not a value it sets.
    return path[0] == "stages" and path[-1] == "stage_id"


def _check_override_targets(ctx: _Ctx) -> None:
    known_stages = {p[1] for p in ctx.profile if p[0] == "stages"}
    known_connectors = {p[1] for p in ctx.profile if p[0] == "connectors"}
    for path in ctx.override:
        if path[0] == "stages" and path[1] not in known_stages:
            raise ValueError(f"override: stages.{path[1]}: unknown stage_id")
        if path[0] == "connectors" and path[1] not in known_connectors:
            raise ValueError(f"override: connectors.{path[1]}: unknown connector")


def _check_topology(config: Mapping[str, Any], where: str) -> None:
    stages = config.get("stages", {})
    for sid, stage in stages.items():
        if "name" not in stage:
            raise ValueError(f"{where}: stages.{sid}: a stage needs a name")
    for name, conn in config.get("connectors", {}).items():
        for key in ("from_stage", "to_stage", "transport"):
            if key not in conn:
                raise ValueError(f"{where}: connectors.{name}: missing {key}")
        for key in ("from_stage", "to_stage"):
            if conn[key] not in stages:
                raise ValueError(f"{where}: connectors.{name}.{key}: no stage with stage_id {conn[key]}")


def _engine_kwargs(values: Mapping[Path_, Any], options: TalkerOptions) -> dict[str, Any]:
    eager = values[("enforce_eager",)]
    compilation: dict[str, Any] = {"cudagraph_mode": cudagraph_mode(options, eager)}
    sizes = values[("cudagraph_capture_sizes",)]
    if not eager and sizes is not None:
        compilation["cudagraph_capture_sizes"] = sorted(sizes)
    return {
        "async_scheduling": values[("async_scheduling",)],
        "max_num_seqs": values[("max_num_seqs",)],
        "max_model_len": values[("max_model_len",)],
        "gpu_memory_utilization": values[("gpu_memory_utilization",)],
        "enforce_eager": eager,
        "compilation_config": compilation,
        "hf_overrides": {HF_OVERRIDES_KEY: options.to_dict()},
    }
