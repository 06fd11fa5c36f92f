"""Profile files: find them, parse them, merge a base_config chain into flat leaves.

Used by reference/deploy/resolve.py (which re-exports these names); the rules of the merge are
documented there. The schema of one file and the leaf paths: reference/deploy/schema.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from reference.deploy.schema import Path_, dotted, walk_profile

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"
REPO_ROOT = PROFILES_DIR.parents[2]
MAX_CHAIN = 8


def profile_path(profile: str | Path) -> Path:
    """A bare name ("default" or "default.yaml") names reference/deploy/profiles/<name>.yaml; a Path or a
    string with a directory part ("./mine.yaml", "/etc/higgs/p.yaml") is a file path."""
    if isinstance(profile, str) and "/" not in profile:
        stem = profile[: -len(".yaml")] if profile.endswith(".yaml") else profile
        path = PROFILES_DIR / f"{stem}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
            raise ValueError(f"unknown profile {profile!r}; known profiles: {known} (use ./{profile} for a local file)")
        return path
    return Path(profile)


def display_path(path: Path) -> str:
    """Repo-relative for files in the repo (reference/deploy/profiles/default.yaml), else as given."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def independent_copy(node: Any) -> Any:
    # safe_load returns one shared object per anchor; rebuild so every alias is its own copy.
    if isinstance(node, dict):
        return {k: independent_copy(v) for k, v in node.items()}
    if isinstance(node, list):
        return [independent_copy(v) for v in node]
    return node


def load_yaml(path: Path) -> Any:
    """Parse one profile file; aliases of one anchor come back as independent containers."""
    with open(path, encoding="utf-8") as fh:
        try:
            return independent_copy(yaml.safe_load(fh))
        except yaml.YAMLError as exc:
            raise ValueError(f"{display_path(path)}: not valid YAML: {exc}") from None


def load_chain(profile: str | Path) -> list[tuple[str, Any]]:
    """[(display path, document)], base first, the named profile last."""
    chain: list[tuple[str, Any]] = []
    path: Path | None = profile_path(profile)
    seen: list[Path] = []
    while path is not None:
        resolved = path.resolve()
        if resolved in seen:
            cycle = " -> ".join(display_path(p) for p in seen + [resolved])
            raise ValueError(f"base_config cycle: {cycle}")
        if len(seen) >= MAX_CHAIN:
            raise ValueError(f"{display_path(path)}: base_config chain deeper than {MAX_CHAIN}")
        if not path.is_file():
            raise ValueError(f"profile file not found: {display_path(path)}")
        seen.append(resolved)
        doc = load_yaml(path)
        chain.append((display_path(path), doc))
        base = doc.get("base_config") if isinstance(doc, Mapping) else None
        path = (path.parent / base) if isinstance(base, str) else None
    return chain[::-1]


Entry = tuple[Any, str]  # (value, origin)


def _apply_clears(merged: dict[Path_, Entry], clears: list[Path_], where: str) -> None:
    for prefix in clears:
        inherited = [p for p in merged if p[: len(prefix)] == prefix]
        if not inherited:
            continue  # nothing to clear: `cpu:` with no overrides is just an empty section
        restore = prefix[0] == "platforms" and any(p[2] == "codec" for p in inherited)
        raise ValueError(
            f"{where}: {dotted(prefix)}: null cannot clear "
            f"{'an inherited platform restore' if restore else 'an inherited value'} "
            f"({', '.join(sorted(dotted(p) for p in inherited))} from {merged[inherited[0]][1]}); "
            "an overlay can change inherited values but not remove them"
        )


def merge_chain(chain: list[tuple[str, Any]]) -> dict[Path_, Entry]:
    """Flatten and merge the chain: {leaf path: (value, file that set it)}, platforms included."""
    merged: dict[Path_, Entry] = {}
    for where, doc in chain:
        leaves, clears = walk_profile(doc, where)
        _apply_clears(merged, clears, where)
        for path, value in leaves.items():
            merged[path] = (value, where)
    _check_platform_targets(merged)
    return merged


def _check_platform_targets(merged: dict[Path_, Entry]) -> None:
    stages = {p[1] for p in merged if p[0] == "stages"}
    connectors = {p[1] for p in merged if p[0] == "connectors"}
    for path, (_, where) in sorted(merged.items(), key=lambda kv: dotted(kv[0])):
        if path[0] != "platforms" or len(path) < 5:
            continue
        if path[2] == "stages" and path[3] not in stages:
            raise ValueError(
                f"{where}: {dotted(path[:4])}: unknown stage_id {path[3]!r}; the profile's stages: "
                f"{', '.join(str(s) for s in sorted(stages)) or 'none'}"
            )
        if path[2] == "connectors" and path[3] not in connectors:
            raise ValueError(
                f"{where}: {dotted(path[:4])}: unknown connector {path[3]!r}; the profile's connectors: "
                f"{', '.join(sorted(connectors)) or 'none'}"
            )


def overrides_to_leaves(overrides: Mapping[str, Any] | None, where: str = "override") -> dict[Path_, Any]:
    """Overrides as dotted keys ("codec.chunk_frames", "stages.1.device") or nested mappings."""
    nested: dict[str, Any] = {}
    stages: dict[int, dict[str, Any]] = {}
    for key, value in (overrides or {}).items():
        parts = str(key).split(".")
        if parts[0] == "platforms":
            raise ValueError(f"{where}: {key}: overrides apply to the target platform; drop 'platforms.'")
        if parts[0] == "stages" and len(parts) == 3:
            try:
                sid = int(parts[1])
            except ValueError:
                raise ValueError(f"{where}: {key}: stage overrides are stages.<stage_id>.<key>") from None
            stages.setdefault(sid, {"stage_id": sid})[parts[2]] = value
            continue
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"{where}: {key}: conflicts with another override")
        node[parts[-1]] = value
    if stages:
        nested["stages"] = list(stages.values())
    leaves, clears = walk_profile(nested, where)
    if clears:
        raise ValueError(f"{where}: {dotted(clears[0])}: null cannot be used as an override here")
    return leaves
