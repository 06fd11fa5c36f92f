"""The deploy-file format: its JSON Schema (reference/deploy/schema.json) and the merge tables.

`python -m reference.deploy.check_profiles` checks every shipped profile against the schema.

The format is vllm-omni's deploy schema (a list of `stages` with their own engine arguments,
`connectors` whose `extra` carries the streaming geometry, `async_chunk`, `platforms`,
`base_config` chains) plus our MRV2 fields:

  model_runner: prefer-v2 | v2 | v1     upstream knows v1 | v2; prefer-v2 keeps the platform-matrix
                                        rule (reference/deploy/platform_matrix.py)
  features: {device_talker_state, model_sampler, full_decode_cudagraphs,
             sampler_cudagraphs, window_aligned_first_chunk}: true | false | null   (reference/deploy/switches.py)
  platforms.<p>.connectors / .features  platform-scoped connectors (upstream drops them silently)
  x-<anything>                          top level only: a place for YAML anchors

`validate_file(doc, where)` checks one file before any merge and raises DeployFileError naming
the file and the key; checks the schema cannot express (stage ids unique, platform sections
naming existing stages and connectors, connector references) are in reference/deploy/loader.py
and reference/deploy/resolve.py.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

SCHEMA_PATH = Path(__file__).resolve().parent / "schema.json"

Path_ = tuple  # a leaf path: ("stages", 0, "max_num_seqs"), ("connectors", "c", "extra", "k"), ...

# Stage keys merged recursively by a base_config overlay (upstream's list); every other stage key
# is replaced whole (compilation_config, hf_overrides, env, ...).
DEEP_MERGE_KEYS = (
    "default_sampling_params",
    "default_pooling_params",
    "subtalker_sampling_params",
    "engine_extras",
    "engine_args",
)
# Stage keys that are not engine arguments of that stage's vLLM engine.
RESERVED_STAGE_KEYS = (
    "stage_id",
    "devices",
    "num_replicas",
    "env",
    "runtime",
    "input_connectors",
    "output_connectors",
    "default_sampling_params",
    "default_pooling_params",
    "subtalker_sampling_params",
    "engine_extras",
    "engine_args",
    "async_chunk",
)
# Streaming geometry: StreamGeometry field -> key in connectors.<name>.extra: upstream's four frame
# counts, and ours, whether chunks grow to codec_chunk_frames (upstream's chunks do not).
GEOMETRY_FRAME_KEYS = {
    "first_chunk_frames": "initial_codec_chunk_frames",
    "chunk_frames": "codec_chunk_frames",
    "left_context_frames": "codec_left_context_frames",
    "right_holdback_frames": "codec_right_holdback_frames",
}
GEOMETRY_KEYS = {**GEOMETRY_FRAME_KEYS, "growing_chunks": "codec_growing_chunks"}
TALKER_STAGE = 0  # engine arguments, sampling defaults
CODEC_STAGE = 1  # code2wav: the codec batch and device
# Values used when no file sets the key (origin "default"). model_runner: upstream's default.
DEFAULTS: dict[Path_, Any] = {
    ("model_runner",): "v1",
    ("stages", TALKER_STAGE, "enforce_eager"): False,
    ("stages", TALKER_STAGE, "async_scheduling"): False,
}


class DeployFileError(ValueError):
    """A deploy file that breaks the schema or a rule of the format; the message names file and key."""


def dotted(path: Path_) -> str:
    return ".".join(str(p) for p in path)


@functools.cache
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@functools.cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(schema())


def _known_keys(subschema: dict[str, Any]) -> list[str]:
    return sorted(subschema.get("properties", {}))


def _message(error) -> tuple[Path_, str]:
    """(key path, message) of one jsonschema error, in the words the rest of the loader uses."""
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        patterns = error.schema.get("patternProperties", {})
        for key in error.instance:
            if key not in allowed and not any(re.search(p, str(key)) for p in patterns):
                known = _known_keys(error.schema)
                if len(known) > 8:
                    return path + (key,), "unknown key (the keys: reference/deploy/schema.json)"
                return path + (key,), f"unknown key; known: {', '.join(known)}"
    if "propertyNames" in error.relative_schema_path:  # a key that is not one of the allowed names
        return path + (error.instance,), f"unknown name; known: {', '.join(error.validator_value)}"
    if error.validator == "enum":
        return path, f"must be one of {', '.join(str(v) for v in error.validator_value if v is not None)}, got {error.instance!r}"
    if error.validator == "type":
        return path, f"must be {' or '.join(error.validator_value if isinstance(error.validator_value, list) else [error.validator_value])}, got {type(error.instance).__name__} {error.instance!r}"
    if error.validator == "required":
        return path, error.message.replace("is a required property", "is required")
    return path, f"{error.message}"


def validate_file(doc: Any, where: str) -> None:
    """Check one deploy file's document; raises DeployFileError("<where>: <key>: <what>")."""
    if not isinstance(doc, dict):
        raise DeployFileError(f"{where}: a deploy file must be a mapping, got {type(doc).__name__}")
    for key in doc:
        if not isinstance(key, str):
            raise DeployFileError(f"{where}: {key!r}: keys must be strings")
    errors = list(_validator().iter_errors(doc))
    if errors:
        # The deepest error first: it names the key closest to the mistake.
        error = max(errors, key=lambda e: (len(e.absolute_path), -len(list(e.context or ()))))
        path, text = _message(error)
        raise DeployFileError(f"{where}: {dotted(path) or '(top level)'}: {text}")
    _check_stage_lists(doc, where)


def _check_stage_lists(doc: dict[str, Any], where: str) -> None:
    lists = [(("stages",), doc.get("stages"))]
    for platform, section in (doc.get("platforms") or {}).items():
        lists.append((("platforms", platform, "stages"), (section or {}).get("stages")))
    for prefix, stages in lists:
        seen: set[int] = set()
        for stage in stages or []:
            sid = stage["stage_id"]
            if sid in seen:
                raise DeployFileError(f"{where}: {dotted(prefix + (sid,))}: stage_id listed twice")
            seen.add(sid)
