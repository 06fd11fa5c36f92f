"""Deploy files: find them, parse them, check each against the schema, merge a base_config chain.

A file becomes flat leaves {path: value}; merging a chain is then a dict update in chain order,
each leaf remembering the file that set it. Where the flattening stops decides the merge, and
follows upstream's loader (vllm-omni config/stage_config.py, read as facts):

- top-level keys other than stages, connectors, platforms, features, serving: replaced whole;
- stages: merged by stage_id; within a stage the keys of DEEP_MERGE_KEYS merge recursively,
  every other key (compilation_config, hf_overrides, env, lists) is replaced whole;
- connectors: merged per connector name, then recursively (so `extra` merges key by key);
- features: per switch; serving (ours): per limit;
- platforms: per platform name; inside a section, stages by stage_id and connectors per name
  as above (platform connectors are ours: upstream drops them), model_runner replaced;
- lists replace; a child null replaces the inherited value (upstream), except where a mapping
  is expected (platforms, a platform section, connectors, a connector, extra, features): a null
  there is an empty mapping, allowed only when nothing is inherited under it, so an overlay
  cannot silently clear an inherited platform restore;
- a platform section may only name stage_ids and connectors the merged file has (upstream
  skips unknown stage_ids silently);
- YAML anchors and merge keys are allowed; every alias is an independent copy; duplicate keys
  are an error (as in upstream's OmegaConf loader).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Mapping

import yaml

from reference.deploy.schema import DEEP_MERGE_KEYS, DeployFileError, Path_, dotted, validate_file

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
REPO_ROOT = PROFILES_DIR.parents[2]
MAX_CHAIN = 8
Entry = tuple[Any, str]  # (value, origin)


def profile_path(profile: str | Path) -> Path:
    """A bare name ("default" or "default.yaml") names reference/deploy/profiles/<name>.yaml; a Path or a
    string with a directory part ("./mine.yaml", "/etc/higgs/p.yaml") is a file path."""
    if isinstance(profile, str) and "/" not in profile:
        stem = profile[: -len(".yaml")] if profile.endswith(".yaml") else profile
        path = PROFILES_DIR / f"{stem}.yaml"
        if not path.is_file():
            if Path(profile).is_file():
                return Path(profile)
            known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
            raise DeployFileError(
                f"unknown profile {profile!r}; known profiles: {known} (use ./{profile} for a local file)"
            )
        return path
    return Path(profile)


@functools.lru_cache(maxsize=256)
def _install_root(folder: Path) -> bool:
    """A folder packages are installed into (site-packages, a pip --target folder): it holds *.dist-info."""
    return any(folder.glob("*.dist-info"))


def display_path(path: Path) -> str:
    """Relative to the install root for installed files (vllm_omni/deploy/x.yaml), repo-relative for
    files in the repo, else as given."""
    resolved = Path(path).resolve()
    for parent in resolved.parents:
        if _install_root(parent):
            return resolved.relative_to(parent).as_posix()
    try:
        return resolved.relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def independent_copy(node: Any) -> Any:
    # safe_load returns one shared object per anchor; rebuild so every alias is its own copy.
    if isinstance(node, dict):
        return {k: independent_copy(v) for k, v in node.items()}
    if isinstance(node, list):
        return [independent_copy(v) for v in node]
    return node


class _NoDuplicates(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):  # type: ignore[override]
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<:` entries may be overridden by explicit keys
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_yaml(path: Path) -> Any:
    """Parse one file; aliases of one anchor come back as independent containers."""
    with open(path, encoding="utf-8") as fh:
        try:
            return independent_copy(yaml.load(fh, Loader=_NoDuplicates))  # noqa: S506 (a SafeLoader)
        except yaml.YAMLError as exc:
            raise DeployFileError(f"{display_path(path)}: not valid YAML: {exc}") from None


def load_chain(profile: str | Path) -> list[tuple[str, Any]]:
    """[(display path, document)], base first, the named file last; each checked against the schema."""
    chain: list[tuple[str, Any]] = []
    path: Path | None = profile_path(profile)
    seen: list[Path] = []
    while path is not None:
        resolved = path.resolve()
        if resolved in seen:
            raise DeployFileError(f"base_config cycle: {' -> '.join(display_path(p) for p in seen + [resolved])}")
        if len(seen) >= MAX_CHAIN:
            raise DeployFileError(f"{display_path(path)}: base_config chain deeper than {MAX_CHAIN}")
        if not path.is_file():
            raise DeployFileError(f"deploy file not found: {display_path(path)}")
        seen.append(resolved)
        doc = load_yaml(path)
        validate_file(doc, display_path(path))
        chain.append((display_path(path), doc))
        base = doc.get("base_config")
        path = (path.parent / base) if isinstance(base, str) else None
    return chain[::-1]


class _Flat:
    """One file's document as leaves and clears (a null where a mapping is expected)."""

    def __init__(self) -> None:
        self.leaves: dict[Path_, Any] = {}
        self.clears: list[Path_] = []

    def deep(self, path: Path_, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                self.deep(path + (key,), item)
        else:
            self.leaves[path] = value  # {} too: it keeps whatever is inherited under it

    def mapping(self, path: Path_, value: Any) -> dict[str, Any]:
        if value is None:
            self.clears.append(path)
            return {}
        return value

    def stages(self, path: Path_, value: Any) -> None:
        for stage in value or []:
            sid = stage["stage_id"]
            self.leaves[path + (sid, "stage_id")] = sid  # the stage exists even with nothing else
            for key, item in stage.items():
                if key == "stage_id":
                    continue
                if key in DEEP_MERGE_KEYS and isinstance(item, dict):
                    self.deep(path + (sid, key), item)
                else:
                    self.leaves[path + (sid, key)] = item

    def connectors(self, path: Path_, value: Any) -> None:
        for name, conn in self.mapping(path, value).items():
            for key, item in self.mapping(path + (name,), conn).items():
                if key == "extra" and item is None:
                    self.clears.append(path + (name, key))
                elif key == "extra":
                    self.deep(path + (name, key), item)
                else:
                    self.leaves[path + (name, key)] = item

    def per_key(self, path: Path_, value: Any) -> None:
        for key, item in self.mapping(path, value).items():
            self.leaves[path + (key,)] = item

    def section(self, prefix: Path_, doc: Mapping[str, Any]) -> None:
        for key, value in doc.items():
            path = prefix + (key,)
            if prefix == () and (key.startswith("x-") or key == "base_config"):
                continue
            if key == "stages":
                self.stages(path, value)
            elif key == "connectors":
                self.connectors(path, value)
            elif key in ("features", "serving"):
                self.per_key(path, value)
            elif key == "platforms" and prefix == ():
                for platform, body in self.mapping(path, value).items():
                    self.section(path + (platform,), self.mapping(path + (platform,), body))
            else:
                self.leaves[path] = value


def flatten(doc: Mapping[str, Any]) -> tuple[dict[Path_, Any], list[Path_]]:
    """(leaves, clears) of one schema-checked document."""
    flat = _Flat()
    flat.section((), doc)
    return flat.leaves, flat.clears


def _under(path: Path_, prefix: Path_) -> bool:
    return len(path) > len(prefix) and path[: len(prefix)] == prefix


def _put(merged: dict[Path_, Entry], path: Path_, entry: Entry) -> None:
    if entry[0] != {}:  # a value (null included) replaces everything inherited under it
        for inherited in [p for p in merged if _under(p, path)]:
            del merged[inherited]
    for i in range(1, len(path)):  # an inherited non-mapping above it is replaced by the mapping
        if path[:i] in merged and not isinstance(merged[path[:i]][0], dict):
            del merged[path[:i]]
    merged[path] = entry


def _apply_clears(merged: dict[Path_, Entry], clears: list[Path_], where: str) -> None:
    for prefix in clears:
        inherited = sorted((p for p in merged if _under(p, prefix)), key=dotted)
        if not inherited:
            continue  # `cpu:` with nothing under it is just an empty section
        restore = prefix[0] == "platforms"
        raise DeployFileError(
            f"{where}: {dotted(prefix)}: null cannot clear "
            f"{'an inherited platform section' if restore else 'inherited values'} "
            f"({', '.join(dotted(p) for p in inherited)} from {merged[inherited[0]][1]}); "
            "an overlay can change inherited values but not remove them"
        )


def merge_chain(chain: list[tuple[str, Any]]) -> dict[Path_, Entry]:
    """Flatten and merge the chain: {leaf path: (value, file that set it)}, platforms included."""
    merged: dict[Path_, Entry] = {}
    for where, doc in chain:
        leaves, clears = flatten(doc)
        _apply_clears(merged, clears, where)
        for path, value in leaves.items():
            _put(merged, path, (value, where))
    _check_platform_targets(merged)
    return merged


def _check_platform_targets(merged: dict[Path_, Entry]) -> None:
    stages = sorted({p[1] for p in merged if p[0] == "stages"})
    connectors = sorted({p[1] for p in merged if p[0] == "connectors"})
    for path, (_, where) in sorted(merged.items(), key=lambda kv: dotted(kv[0])):
        if path[0] != "platforms" or len(path) < 5:
            continue
        if path[2] == "stages" and path[3] not in stages:
            raise DeployFileError(
                f"{where}: {dotted(path[:4])}: unknown stage_id {path[3]!r}; the file's stages: "
                f"{', '.join(str(s) for s in stages) or 'none'}"
            )
        if path[2] == "connectors" and path[3] not in connectors:
            raise DeployFileError(
                f"{where}: {dotted(path[:4])}: unknown connector {path[3]!r}; the file's connectors: "
                f"{', '.join(connectors) or 'none'}"
            )


def overrides_to_leaves(overrides: Mapping[str, Any] | None, where: str = "override") -> dict[Path_, Any]:
    """Overrides as dotted keys ("stages.0.max_num_seqs", "connectors.c.extra.codec_chunk_frames")
    or nested mappings in the file format; checked against the same schema, no platforms."""
    doc: dict[str, Any] = {}
    stages: dict[int, dict[str, Any]] = {}
    for key, value in (overrides or {}).items():
        parts = str(key).split(".")
        if parts[0] in ("platforms", "base_config"):
            raise DeployFileError(f"{where}: {key}: overrides apply to the target platform; drop '{parts[0]}'")
        if parts[0] == "stages" and len(parts) >= 3:
            try:
                sid = int(parts[1])
            except ValueError:
                raise DeployFileError(f"{where}: {key}: stage overrides are stages.<stage_id>.<key>") from None
            node = stages.setdefault(sid, {"stage_id": sid})
            parts = parts[2:]
        else:
            node = doc
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise DeployFileError(f"{where}: {key}: conflicts with another override")
        node[parts[-1]] = value
    if stages:
        doc["stages"] = [*doc.get("stages", []), *stages.values()]
    validate_file(doc, where)
    leaves, clears = flatten(doc)
    if clears:
        raise DeployFileError(f"{where}: {dotted(clears[0])}: null cannot be used as an override here")
    return leaves
