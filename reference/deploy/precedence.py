"""Which layer gives a key its value: `PRECEDENCE`, an ordered first-match rule table.

Keys are leaf paths of the resolved file: ("model_runner",), ("stages", 0, "max_num_seqs"),
("connectors", "talker_to_code2wav", "extra", "codec_left_context_frames"), ("features", name).
The geometry keys are the five of schema.GEOMETRY_KEYS in the `extra` of the talker's output
connector (stage 0's output_connectors); without such a connector, ("geometry", field).

  1. override            the key is in the overrides (--set)
  2. first-chunk-switch  the first-chunk geometry key when window_aligned_first_chunk resolved
                         off (an explicit false under V2, or any V1 run): 1 frame
  3. platform-section    the key is in platforms.<platform> (for geometry keys: a platform restore)
  4. matrix-restore      geometry keys when the platform turned a V2 request into V1 (the matrix
                         pins V1 for prefer-v2, or the platform section says model_runner: v1 under
                         a file that asks for V2): the upstream V1 geometry
  5. profile             the key is in the top level of the chain (the overlay's value over its base's)
  6. runner-default      geometry keys absent everywhere: the runner's geometry
  7. schema-default      schema.DEFAULTS
So a platform restore beats the file's geometry, even one set by an overlay; an explicit codec
override beats the first-chunk switch (rule 1 before rule 2). model_runner is resolved first
(rules 2, 4 and 6 do not apply to it), then the runner, then the switches, then the geometry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from reference.codec.geometry import DEFAULT_GEOMETRY, UPSTREAM_V1, StreamGeometry
from reference.deploy.platform_matrix import RunnerChoice
from reference.deploy.schema import DEFAULTS, Path_
from reference.talker.options import TalkerOptions

Entry = tuple[Any, str]  # (value, origin)


@dataclass
class Ctx:
    platform: str
    override: dict[Path_, Entry]
    platform_section: dict[Path_, Entry]
    profile: dict[Path_, Entry]
    geometry_paths: dict[Path_, str] = field(default_factory=dict)  # path -> StreamGeometry field
    choice: RunnerChoice | None = None
    restore: str | None = None  # why the V1 geometry is restored, when it is
    options: TalkerOptions | None = None
    option_origins: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    name: str
    doc: str
    applies: Callable[[Ctx, Path_], bool]
    pick: Callable[[Ctx, Path_], Entry]


def runner_geometry(runner: str) -> StreamGeometry:
    return DEFAULT_GEOMETRY if runner == "v2" else UPSTREAM_V1


def _first_chunk_off(c: Ctx, p: Path_) -> bool:
    return (
        c.geometry_paths.get(p) == "first_chunk_frames"
        and c.options is not None
        and not c.options.window_aligned_first_chunk
    )


PRECEDENCE: tuple[Rule, ...] = (
    Rule("override", "overrides / --set", lambda c, p: p in c.override, lambda c, p: c.override[p]),
    Rule(
        "first-chunk-switch",
        "the first-chunk geometry key when window_aligned_first_chunk resolved off (always under V1): 1 frame",
        _first_chunk_off,
        lambda c, p: (1, f"window_aligned_first_chunk off ({c.option_origins['window_aligned_first_chunk']})"),
    ),
    Rule(
        "platform-section",
        "platforms.<platform> of the chain (for geometry keys: a platform restore)",
        lambda c, p: p in c.platform_section,
        lambda c, p: c.platform_section[p],
    ),
    Rule(
        "matrix-restore",
        "geometry keys when the platform turned a V2 request into V1: the upstream V1 geometry",
        lambda c, p: p in c.geometry_paths and c.restore is not None,
        lambda c, p: (getattr(UPSTREAM_V1, c.geometry_paths[p]), f"{c.restore} (V1 geometry)"),
    ),
    Rule("profile", "top level of the chain", lambda c, p: p in c.profile, lambda c, p: c.profile[p]),
    Rule(
        "runner-default",
        "geometry keys set nowhere: the runner's geometry",
        lambda c, p: p in c.geometry_paths and c.choice is not None,
        lambda c, p: (
            getattr(runner_geometry(c.choice.runner), c.geometry_paths[p]),  # type: ignore[union-attr]
            f"runner default ({c.choice.runner})",  # type: ignore[union-attr]
        ),
    ),
    Rule("schema-default", "schema.DEFAULTS", lambda c, p: p in DEFAULTS, lambda c, p: (DEFAULTS[p], "default")),
)


def pick(ctx: Ctx, path: Path_) -> tuple[Any, str, str] | None:
    """(value, origin, rule name) of the first matching rule, or None."""
    for rule in PRECEDENCE:
        if rule.applies(ctx, path):
            value, origin = rule.pick(ctx, path)
            return value, origin, rule.name
    return None


def restore_reason(ctx: Ctx, requested: str, request_rule: str) -> str | None:
    """Why the V1 geometry is restored on this platform, or None.

    request_rule: the PRECEDENCE rule that gave model_runner its value.
    """
    choice = ctx.choice
    if choice is None or choice.runner != "v1":
        return None
    if choice.pinned:
        return f"platform matrix: {ctx.platform} pins V1"
    file_request = ctx.profile.get(("model_runner",), (DEFAULTS[("model_runner",)], ""))[0]
    if request_rule == "platform-section" and requested == "v1" and file_request in ("v2", "prefer-v2"):
        return f"platforms.{ctx.platform}.model_runner: v1 falls back from {file_request}"
    return None
