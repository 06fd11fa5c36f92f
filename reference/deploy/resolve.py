"""Resolve a deploy file for a platform: `resolve_deployment(file, platform, overrides)`.

It returns a frozen `ResolvedDeployment` and logs its warnings exactly once; everything it calls
is pure, so calling helpers again (or `TalkerOptions.from_dict` in each worker) never repeats a
warning. The format and its merge: reference/deploy/schema.py, reference/deploy/loader.py; which
layer wins: reference/deploy/precedence.py; the runner: reference/deploy/platform_matrix.py.

What the launcher reads, all from the resolved file (no second source of truth):
- engine_kwargs, env, default_sampling_params: from stage 0 (reference/deploy/launch.py);
- geometry: StreamGeometry from the extra of stage 0's output connector (an
  initial_codec_chunk_frames of 0 means, as upstream, no smaller first chunk: a whole chunk);
- codec_stage: stage 1 (code2wav): its max_num_seqs is the codec batch, its devices the device.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from reference.codec.geometry import StreamGeometry
from reference.deploy.launch import attention_warnings, default_sampling, engine_env, engine_kwargs
from reference.deploy.loader import (
    PROFILES_DIR,
    display_path,
    independent_copy,
    load_chain,
    load_yaml,
    merge_chain,
    overrides_to_leaves,
    profile_path,
)
from reference.deploy.platform_matrix import check_platform, select_runner
from reference.deploy.precedence import PRECEDENCE, Ctx, pick, restore_reason
from reference.deploy.schema import CODEC_STAGE, DEFAULTS, GEOMETRY_KEYS, TALKER_STAGE, DeployFileError, Path_, dotted
from reference.deploy.switches import SWITCH_NAMES, TalkerOptions, first_chunk_frames, resolve_switches

logger = logging.getLogger("higgs_ref.deploy")

__all__ = [
    "PRECEDENCE",
    "PROFILES_DIR",
    "ResolvedDeployment",
    "display_path",
    "load_chain",
    "load_yaml",
    "merge_chain",
    "overrides_to_leaves",
    "profile_path",
    "resolve_deployment",
]


@dataclass(frozen=True)
class ResolvedDeployment:
    """Everything the launcher needs. Built fresh by each resolve_deployment call; treat as read-only."""

    profile: str  # display path of the deploy file
    platform: str
    runner: str  # "v1" | "v2"
    runner_rule: str  # the platform_matrix rule that chose it
    geometry: StreamGeometry
    geometry_connector: str | None  # the connector whose extra carries the geometry
    options: TalkerOptions
    engine_kwargs: dict[str, Any]  # stage 0, for vllm.EngineArgs / vllm.LLM
    env: dict[str, str]  # set before vLLM starts
    default_sampling_params: dict[str, Any]
    codec_stage: dict[str, Any] | None  # stage 1 (code2wav), resolved
    stages: tuple[dict[str, Any], ...]  # sorted by stage_id
    connectors: dict[str, dict[str, Any]]
    config: dict[str, Any]  # the effective file for this platform (nested; stages keyed by stage_id)
    origins: dict[str, str]  # dotted key -> where its value came from
    warnings: tuple[str, ...]  # already logged once by resolve_deployment

    def serving_setting(self, key: str, use: str) -> Any:
        """serving.KEY of the effective file; where it is not set, a ValueError naming it and its `use`."""
        serving = self.config.get("serving") or {}
        if key not in serving:
            raise ValueError(f"{self.profile}: serving.{key} is not set: {use} "
                             "(reference/deploy/profiles/default.yaml sets it)")
        return serving[key]


def _nest(values: Mapping[Path_, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in sorted(values.items(), key=lambda kv: (len(kv[0]), [str(p) for p in kv[0]])):
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = independent_copy(value)
    return out


def _async_v1_warning(origin: str) -> str:
    return (
        f"async_scheduling: true ({origin}) with Model Runner V1: V1 runs the next step on placeholder "
        "tokens before the talker's host-side state sees the sampled codes; set async_scheduling: false "
        "for V1, or use a V2 profile (reference/deploy/profiles/default.yaml) to keep async scheduling"
    )


def _is_geometry_key(path: Path_) -> bool:
    return len(path) == 4 and path[0] == "connectors" and path[2] == "extra" and path[3] in GEOMETRY_KEYS.values()


def resolve_deployment(
    profile: str | Path, platform: str, overrides: Mapping[str, Any] | None = None
) -> ResolvedDeployment:
    """Resolve `profile` (a name in reference/deploy/profiles/ or a path) for `platform`, once per launch.

    Raises ValueError (DeployFileError, RunnerUnavailable, SamplingParamsError) on any invalid
    combination. Logs each warning once on the "higgs_ref.deploy" logger.
    """
    check_platform(platform)
    path = profile_path(profile)
    merged = merge_chain(load_chain(path))
    name = display_path(path)
    prefix = ("platforms", platform)
    ctx = Ctx(
        platform=platform,
        override={p: (v, "override") for p, v in overrides_to_leaves(overrides).items()},
        platform_section={p[2:]: (v, f"{o} platforms.{platform}") for p, (v, o) in merged.items() if p[:2] == prefix},
        profile={p: e for p, e in merged.items() if p[0] != "platforms"},
    )
    _check_override_targets(ctx)
    values: dict[Path_, Any] = {}
    origins: dict[str, str] = {}
    rules: dict[Path_, str] = {}

    def take(key: Path_) -> Any:
        found = pick(ctx, key)
        if found is None:  # pragma: no cover (every key passed here has a layer)
            raise DeployFileError(f"{name}: {dotted(key)} is not set")
        values[key], origins[dotted(key)], rules[key] = found
        return found[0]

    requested = take(("model_runner",))
    ctx.choice = select_runner(requested, platform, origins["model_runner"])
    ctx.restore = restore_reason(ctx, requested, rules[("model_runner",)])
    origins["runner"] = f"{ctx.choice.reason} (model_runner: {requested} from {origins['model_runner']})"

    keys = set(ctx.override) | set(ctx.platform_section) | set(ctx.profile)
    has_talker = ("stages", TALKER_STAGE, "stage_id") in keys
    keys |= {k for k in DEFAULTS if k[0] != "stages" or has_talker}
    deferred = {k for k in keys if _is_geometry_key(k)}
    for key in sorted(keys - deferred - {("model_runner",)}, key=dotted):
        take(key)
    if not has_talker:
        raise DeployFileError(f"{name}: stages: no stage_id {TALKER_STAGE}; the talker's engine arguments come from it")
    connector = _talker_connector(values, name)
    fields = GEOMETRY_KEYS.items()
    if connector is None:
        ctx.geometry_paths = {("geometry", f): f for f, _ in fields}
    else:
        ctx.geometry_paths = {("connectors", connector, "extra", key): f for f, key in fields}
    for key in sorted(deferred - set(ctx.geometry_paths), key=dotted):
        take(key)

    talker = {k[2:]: v for k, v in values.items() if k[:2] == ("stages", TALKER_STAGE) and len(k) == 3}
    switches = resolve_switches(
        {n: values.get(("features", n)) for n in SWITCH_NAMES},
        ctx.choice.runner,
        enforce_eager=bool(talker.get(("enforce_eager",))),
        origins={n: origins.get(f"features.{n}", "") for n in SWITCH_NAMES},
    )
    ctx.options, ctx.option_origins = switches.options, switches.origins
    origins.update({f"options.{n}": o for n, o in switches.origins.items()})

    geometry = _geometry(ctx, take, origins, name)
    if ctx.options.runner == "v2" and ctx.options.window_aligned_first_chunk:
        key = next(k for k, f in ctx.geometry_paths.items() if f == "first_chunk_frames")
        where = f"{origins['geometry.first_chunk_frames']}: {dotted(key)}"
        first_chunk_frames(ctx.options, geometry.first_chunk_frames, where)  # raises unless window-aligned
    for key in [k for k in ctx.geometry_paths if k[0] == "geometry"]:
        values.pop(key)  # no connector: the geometry is not a value of the file

    config = _nest(values)
    _check_topology(config, origins, name)
    stage0 = config["stages"][TALKER_STAGE]
    sampling = default_sampling(stage0, origins, ctx.choice.runner)
    warnings = list(switches.warnings)
    if ctx.choice.runner == "v1" and stage0.get("async_scheduling"):
        warnings.append(_async_v1_warning(origins[f"stages.{TALKER_STAGE}.async_scheduling"]))
    kwargs, mode_warnings = engine_kwargs(stage0, ctx.options, origins)
    warnings += mode_warnings + attention_warnings(config["stages"], platform, origins)
    stages = tuple(independent_copy(config["stages"][sid]) for sid in sorted(config["stages"]))
    resolved = ResolvedDeployment(
        profile=name,
        platform=platform,
        runner=ctx.choice.runner,
        runner_rule=ctx.choice.rule,
        geometry=geometry,
        geometry_connector=connector,
        options=ctx.options,
        engine_kwargs=kwargs,
        env=engine_env(stage0, ctx.choice.runner, origins),
        default_sampling_params=sampling,
        codec_stage=independent_copy(config["stages"].get(CODEC_STAGE)),
        stages=stages,
        connectors=independent_copy(config.get("connectors", {})),
        config=config,
        origins=origins,
        warnings=tuple(warnings),
    )
    for message in resolved.warnings:  # the only place that logs: once per launch
        logger.warning(message)
    return resolved


def _talker_connector(values: Mapping[Path_, Any], where: str) -> str | None:
    """The connector named by stage 0's output_connectors (the first, by key), if any."""
    refs = values.get(("stages", TALKER_STAGE, "output_connectors")) or {}
    for key in sorted(refs):
        return refs[key]
    return None


def _geometry(ctx: Ctx, take, origins: dict[str, str], where: str) -> StreamGeometry:
    frames: dict[str, int | bool] = {}
    for path, field_name in ctx.geometry_paths.items():
        value = take(path)
        origin = origins[dotted(path)]
        origins[f"geometry.{field_name}"] = origin
        if field_name == "growing_chunks":
            if not isinstance(value, bool):
                raise DeployFileError(f"{origin}: {dotted(path)}: must be true or false, got {value!r}")
        elif not isinstance(value, int) or isinstance(value, bool) or value < (1 if field_name == "chunk_frames" else 0):
            floor = 1 if field_name == "chunk_frames" else 0
            raise DeployFileError(f"{origin}: {dotted(path)}: must be an integer >= {floor}, got {value!r}")
        frames[field_name] = value
    if frames["first_chunk_frames"] == 0:  # upstream: 0 = no smaller first chunk
        frames["first_chunk_frames"] = frames["chunk_frames"]
        origins["geometry.first_chunk_frames"] += " (0: a whole chunk)"
    return StreamGeometry(**frames)


def _check_override_targets(ctx: Ctx) -> None:
    known_stages = {p[1] for p in ctx.profile if p[0] == "stages"}
    known_connectors = {p[1] for p in ctx.profile if p[0] == "connectors"}
    for path in ctx.override:
        if path[0] == "stages" and path[1] not in known_stages:
            raise DeployFileError(f"override: stages.{path[1]}: unknown stage_id")
        if path[0] == "connectors" and path[1] not in known_connectors:
            raise DeployFileError(f"override: connectors.{path[1]}: unknown connector")


def _check_topology(config: Mapping[str, Any], origins: Mapping[str, str], file: str) -> None:
    connectors = config.get("connectors", {})
    for name, conn in connectors.items():
        if "name" not in conn:
            keys = [k for k in origins if k.startswith(f"connectors.{name}.")]
            written = [origins[k] for k in keys if not _is_geometry_key(tuple(k.split(".")))]
            where = written[0] if written else file
            raise DeployFileError(f"{where}: connectors.{name}: no name (the connector class)")
    for sid, stage in config["stages"].items():
        for side in ("input_connectors", "output_connectors"):
            for key, ref in (stage.get(side) or {}).items():
                if ref not in connectors:
                    raise DeployFileError(
                        f"{origins[f'stages.{sid}.{side}']}: stages.{sid}.{side}.{key}: unknown connector "
                        f"{ref!r}; the file's connectors: {', '.join(sorted(connectors)) or 'none'}"
                    )
