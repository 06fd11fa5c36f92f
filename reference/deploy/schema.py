"""The deploy-profile YAML schema, and the walk that turns one profile file into flat leaves.

A profile file is a mapping with these keys (all optional in one file; the merged chain must
have every key of `REQUIRED`):

  base_config: str              another profile file, relative to this one; this file overlays it
  description: str
  model_runner: prefer-v2 | v2 | v1   (see reference/deploy/platform_matrix.py)
  async_scheduling: bool
  enforce_eager: bool
  cudagraph_capture_sizes: [int >= 1, ...] | null   (null: vLLM's default sizes)
  max_num_seqs: int >= 1
  max_model_len: int >= 1
  gpu_memory_utilization: float in (0, 1]
  codec: {first_chunk_frames, chunk_frames, left_context_frames, right_holdback_frames}: int
                                streaming geometry in codec frames (reference/codec/geometry.py)
  features: {device_talker_state, model_sampler, full_decode_cudagraphs,
             window_aligned_first_chunk}: true | false | null   (null: follow the runner)
  default_sampling_params: {field: value}   checked by reference/deploy/sampling.py
  stages: [{stage_id: int, name: str, device: str, max_batch_size: int >= 1}]   merged by stage_id
  connectors: {name: {from_stage: int, to_stage: int, transport: in_process | shared_memory,
                      max_inflight_chunks: int >= 1}}   merged per connector name
  platforms: {cuda | rocm | npu | xpu | musa | cpu: {any key above except base_config,
              description, platforms}}   a platform section may only override stages and
                                         connectors that exist
  x-<anything>: ignored; a place for YAML anchors (`x-v1-engine: &v1_engine {...}`)

Flat leaves: a file becomes {path: value}, path a tuple such as ("max_num_seqs",),
("codec", "chunk_frames"), ("stages", 1, "device"), ("connectors", "talker_to_code2wav",
"transport"), ("platforms", "cpu", "enforce_eager"). Deep merging is then a dict update.
A mapping written as null (`cpu:` with nothing after it) becomes a *clear* of its prefix, which
the loader allows only where nothing is inherited under it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from reference.deploy.switches import SWITCH_NAMES
from reference.deploy.platform_matrix import PLATFORMS, RUNNER_REQUESTS

Path_ = tuple  # a leaf path: ("codec", "chunk_frames"), ("stages", 1, "device"), ...

CODEC_FIELDS = ("first_chunk_frames", "chunk_frames", "left_context_frames", "right_holdback_frames")
TRANSPORTS = ("in_process", "shared_memory")
REQUIRED = ("model_runner", "async_scheduling", "max_num_seqs", "max_model_len", "gpu_memory_utilization")
# Values used when no file sets the key (origin "default").
DEFAULTS: dict[Path_, Any] = {
    ("enforce_eager",): False,
    ("cudagraph_capture_sizes",): None,
    **{("features", name): None for name in SWITCH_NAMES},
}
# Leaves whose null is a value (follow the runner / vLLM default / "unset"), not a clear.
NULLABLE_PREFIXES = (("features",), ("cudagraph_capture_sizes",), ("default_sampling_params",))


def dotted(path: Path_) -> str:
    return ".".join(str(p) for p in path)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check(cond: bool, need: str) -> Callable[[Any], str | None]:
    return lambda v: None if cond(v) else need  # type: ignore[operator]


_SCALARS: dict[str, Callable[[Any], str | None]] = {
    "base_config": _check(lambda v: isinstance(v, str) and v != "", "a file name"),
    "description": _check(lambda v: isinstance(v, str), "a string"),
    "model_runner": _check(lambda v: v in RUNNER_REQUESTS, f"one of {', '.join(RUNNER_REQUESTS)}"),
    "async_scheduling": _check(lambda v: isinstance(v, bool), "true or false"),
    "enforce_eager": _check(lambda v: isinstance(v, bool), "true or false"),
    "cudagraph_capture_sizes": _check(
        lambda v: v is None or (isinstance(v, list) and v != [] and all(_is_int(x) and x >= 1 for x in v)),
        "a non-empty list of integers >= 1, or null",
    ),
    "max_num_seqs": _check(lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "max_model_len": _check(lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "gpu_memory_utilization": _check(
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1, "a number in (0, 1]"
    ),
}
_CODEC = {name: _check(lambda v: _is_int(v) and v >= 0, "an integer >= 0") for name in CODEC_FIELDS}
_FEATURES = {name: _check(lambda v: v is None or isinstance(v, bool), "true, false or null") for name in SWITCH_NAMES}
_STAGE = {
    "stage_id": _check(_is_int, "an integer"),
    "name": _check(lambda v: isinstance(v, str) and v != "", "a name"),
    "device": _check(lambda v: isinstance(v, str) and v != "", "a device string such as cuda:0"),
    "max_batch_size": _check(lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
}
_CONNECTOR = {
    "from_stage": _check(_is_int, "a stage_id"),
    "to_stage": _check(_is_int, "a stage_id"),
    "transport": _check(lambda v: v in TRANSPORTS, f"one of {', '.join(TRANSPORTS)}"),
    "max_inflight_chunks": _check(lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
}
FILE_ONLY_KEYS = ("base_config", "description", "platforms")


class _Walk:
    def __init__(self, where: str) -> None:
        self.where = where
        self.leaves: dict[Path_, Any] = {}
        self.clears: list[Path_] = []

    def fail(self, path: Path_, msg: str) -> None:
        raise ValueError(f"{self.where}: {dotted(path)}: {msg}")

    def leaf(self, path: Path_, value: Any, check: Callable[[Any], str | None]) -> None:
        nullable = any(path[: len(p)] == p for p in NULLABLE_PREFIXES)
        if value is None and not nullable:
            self.clears.append(path)  # the loader decides whether clearing is allowed
            return
        need = check(value)
        if need is not None:
            self.fail(path, f"must be {need}, got {value!r}")
        self.leaves[path] = value

    def mapping(self, path: Path_, value: Any) -> Mapping[str, Any] | None:
        if value is None:
            self.clears.append(path)
            return None
        if not isinstance(value, Mapping):
            self.fail(path, f"must be a mapping, got {type(value).__name__} {value!r}")
        return value

    def fields(self, path: Path_, value: Mapping[str, Any], spec: Mapping[str, Callable[[Any], str | None]]) -> None:
        for key, item in value.items():
            if key not in spec:
                self.fail(path + (key,), f"unknown key; known: {', '.join(spec)}")
            self.leaf(path + (key,), item, spec[key])

    def section(self, prefix: Path_, doc: Mapping[str, Any], in_platform: bool) -> None:
        for key, value in doc.items():
            if not isinstance(key, str):
                self.fail(prefix + (key,), "keys must be strings")
            path = prefix + (key,)
            if key.startswith("x-") and not in_platform and prefix == ():
                continue
            if key in FILE_ONLY_KEYS and in_platform:
                self.fail(path, "not allowed inside a platform section")
            if key in _SCALARS:
                self.leaf(path, value, _SCALARS[key])
            elif key in ("codec", "features"):
                body = self.mapping(path, value)
                if body is not None:
                    self.fields(path, body, _CODEC if key == "codec" else _FEATURES)
            elif key == "default_sampling_params":
                body = self.mapping(path, value)
                for name, item in (body or {}).items():
                    self.leaves[path + (name,)] = item  # content checked by sampling_validation
            elif key == "stages":
                self.stages(path, value)
            elif key == "connectors":
                body = self.mapping(path, value)
                for name, conn in (body or {}).items():
                    conn_body = self.mapping(path + (name,), conn)
                    if conn_body is not None:
                        self.fields(path + (name,), conn_body, _CONNECTOR)
            elif key == "platforms" and not in_platform:
                body = self.mapping(path, value)
                for platform, section in (body or {}).items():
                    if platform not in PLATFORMS:
                        self.fail(path + (platform,), f"unknown platform; known: {', '.join(PLATFORMS)}")
                    section_body = self.mapping(path + (platform,), section)
                    if section_body is not None:
                        self.section(path + (platform,), section_body, in_platform=True)
            else:
                self.fail(path, "unknown key (see reference/deploy/schema.py)")

    def stages(self, path: Path_, value: Any) -> None:
        if not isinstance(value, list):
            self.fail(path, f"must be a list of {{stage_id: ..., ...}}, got {type(value).__name__} {value!r}")
        seen: set[int] = set()
        for i, stage in enumerate(value):
            if not isinstance(stage, Mapping) or "stage_id" not in stage:
                self.fail(path + (i,), f"each stage must be a mapping with a stage_id, got {stage!r}")
            sid = stage["stage_id"]
            if not _is_int(sid):
                self.fail(path + (i, "stage_id"), f"must be an integer, got {sid!r}")
            if sid in seen:
                self.fail(path + (sid,), "stage_id listed twice")
            seen.add(sid)
            self.fields(path + (sid,), stage, _STAGE)


def walk_profile(doc: Any, where: str) -> tuple[dict[Path_, Any], list[Path_]]:
    """Check one file's document against the schema; return (leaves, clears). Raises ValueError(where...)."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"{where}: a profile must be a mapping, got {type(doc).__name__}")
    walk = _Walk(where)
    walk.section((), doc, in_platform=False)
    return walk.leaves, walk.clears
