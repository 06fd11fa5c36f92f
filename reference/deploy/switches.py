"""Feature switches for the V2 behaviour of the Higgs talker, resolved once into TalkerOptions.

Each switch is tri-state in a profile's `features:` section: unset/null follows the runner,
true/false is an explicit choice. Resolution happens ONCE, in the launching process
(`reference.deploy.resolve.resolve_deployment`); the result is a frozen `TalkerOptions` that
travels to the workers inside the HF config (vLLM `hf_overrides`, key `HF_OVERRIDES_KEY`) and is
read there with `TalkerOptions.from_dict`, which never logs and never re-resolves. So warnings
about switches are emitted once per launch, not once per worker.

Switches (V2 default in brackets; under V1 every switch is off and explicit values are ignored):
- device_talker_state [on, structural]: talker state lives in device slot buffers, no host
  sync on the decode path. V1 keeps it on the host.
- model_sampler [on, structural]: the talker's sampler is installed in the V2 ModelState
  (`custom_sampler`). V1 installs its sampler through the worker instead.
- full_decode_cudagraphs [on]: decode runs in FULL CUDA graphs (cudagraph_mode
  FULL_AND_PIECEWISE); off: PIECEWISE only.
- sampler_cudagraphs [on]: the talker's sampling step replays CUDA graphs per batch bucket
  (reference/talker/step_graphs.py); off: it launches its kernels eagerly every step.
  Both graph switches resolve off when enforce_eager is set (explicit on with enforce_eager is an
  error).
- window_aligned_first_chunk [on]: the first streamed chunk is one 8-frame codec window; off:
  a 1-frame first chunk (rule `first-chunk-switch` in reference/deploy/precedence.py).

Rules, all in `resolve_switches` (pure: it returns warnings, the caller logs them):
- V2 + a structural switch explicitly false: ValueError naming the switch; the way out is the
  V1 opt-out profile.
- V1 + any explicitly set switch: ONE warning listing them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from reference.deploy.platform_matrix import V1_OPT_OUT_PROFILE
from reference.talker.options import HF_OVERRIDES_KEY, TalkerOptions

# One codec window: the first chunk of a window-aligned stream, in codec frames.
CODEC_WINDOW_FRAMES = 8


@dataclass(frozen=True)
class Switch:
    name: str
    structural: bool
    on: str  # what "on" does (V2 default)
    off: str  # what "off" does


SWITCHES: tuple[Switch, ...] = (
    Switch(
        "device_talker_state",
        structural=True,
        on="talker state in device slot buffers, no host sync on the decode path",
        off="talker state kept on the host",
    ),
    Switch(
        "model_sampler",
        structural=True,
        on="the talker's sampler is installed in the V2 ModelState",
        off="no ModelState sampler (V1 installs the talker's sampler through its worker)",
    ),
    Switch(
        "full_decode_cudagraphs",
        structural=False,
        on="cudagraph_mode FULL_AND_PIECEWISE (FULL graphs for decode)",
        off="cudagraph_mode PIECEWISE",
    ),
    Switch(
        "sampler_cudagraphs",
        structural=False,
        on="the talker's sampling step replayed from CUDA graphs",
        off="the talker's sampling step launched eagerly",
    ),
    Switch(
        "window_aligned_first_chunk",
        structural=False,
        on=f"first chunk = one {CODEC_WINDOW_FRAMES}-frame codec window",
        off="1-frame first chunk",
    ),
)
SWITCH_NAMES = tuple(s.name for s in SWITCHES)
GRAPH_SWITCHES = ("full_decode_cudagraphs", "sampler_cudagraphs")  # off under enforce_eager


@dataclass(frozen=True)
class SwitchResolution:
    options: TalkerOptions
    origins: dict[str, str]  # switch name -> where its value came from
    warnings: tuple[str, ...]  # for the caller to log, once


def v1_ignored_warning(names: list[str]) -> str:
    return (
        f"Model Runner V1 ignores the V2 feature switches: {', '.join(names)}; "
        "remove them from the V1 profile or use a V2 profile (reference/deploy/profiles/default.yaml)"
    )


def structural_off_message(name: str) -> str:
    switch = next(s for s in SWITCHES if s.name == name)
    return (
        f"features.{name}: false is not supported under Model Runner V2: it is structural "
        f"({switch.on}). Remove the switch, or use the V1 opt-out profile {V1_OPT_OUT_PROFILE} "
        "(model_runner: v1) for V1 behaviour"
    )


def resolve_switches(
    requested: Mapping[str, bool | None],
    runner: str,
    enforce_eager: bool = False,
    origins: Mapping[str, str] | None = None,
) -> SwitchResolution:
    """Resolve the tri-state switches for `runner`. Pure: never logs; may be called any number of times.

    requested: switch name -> True/False/None (None or absent = follow the runner).
    origins: switch name -> where an explicit value was set (quoted in origins of the result).
    """
    if runner not in ("v1", "v2"):
        raise ValueError(f"runner must be 'v1' or 'v2', got {runner!r}")
    unknown = sorted(set(requested) - set(SWITCH_NAMES))
    if unknown:
        raise ValueError(f"unknown feature switches {unknown}; known: {', '.join(SWITCH_NAMES)}")
    origins = origins or {}
    explicit = {n: v for n, v in requested.items() if v is not None}
    for name, value in explicit.items():
        if not isinstance(value, bool):
            raise ValueError(f"features.{name} must be true, false or null, got {value!r}")

    values: dict[str, bool] = {}
    where: dict[str, str] = {}
    warnings: list[str] = []
    if runner == "v1":
        values = {n: False for n in SWITCH_NAMES}
        where = {n: "runner default (v1)" for n in SWITCH_NAMES}
        if explicit:
            warnings.append(v1_ignored_warning([n for n in SWITCH_NAMES if n in explicit]))
    else:
        for switch in SWITCHES:
            value = explicit.get(switch.name)
            if value is None:
                values[switch.name], where[switch.name] = True, "runner default (v2)"
                continue
            if switch.structural and value is False:
                raise ValueError(structural_off_message(switch.name))
            values[switch.name], where[switch.name] = value, origins.get(switch.name, "explicit")
        for name in GRAPH_SWITCHES:
            if enforce_eager and values[name]:
                if name in explicit:
                    raise ValueError(
                        f"features.{name}: true needs CUDA graphs, but enforce_eager is true; "
                        "set enforce_eager: false or remove the switch"
                    )
                values[name], where[name] = False, "enforce_eager: true"
    return SwitchResolution(TalkerOptions(runner=runner, **values), where, tuple(warnings))


def cudagraph_mode(options: TalkerOptions, enforce_eager: bool) -> str:
    """vLLM compilation_config.cudagraph_mode for the talker's engine."""
    if enforce_eager:
        return "NONE"
    return "FULL_AND_PIECEWISE" if options.full_decode_cudagraphs else "PIECEWISE"


def first_chunk_frames(options: TalkerOptions, profile_frames: int, key: str = "first chunk") -> int:
    """The first chunk under V2: the profile's window-aligned value when on, 1 frame when off.

    key: where the value was set ("<file>: connectors.<name>.extra.initial_codec_chunk_frames"),
    quoted in the error."""
    if not options.window_aligned_first_chunk:
        return 1
    if profile_frames % CODEC_WINDOW_FRAMES:
        raise ValueError(
            f"{key} = {profile_frames}: features.window_aligned_first_chunk is on under Model Runner V2 but "
            f"{profile_frames} frames is not a whole number of {CODEC_WINDOW_FRAMES}-frame codec windows; set it "
            f"to {CODEC_WINDOW_FRAMES}, turn the switch off, or use the V1 opt-out profile {V1_OPT_OUT_PROFILE}"
        )
    return profile_frames
