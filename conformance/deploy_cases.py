"""Load and check the deploy-profile case files in conformance/cases/profiles/.

Each file is a YAML mapping whose list-valued keys named in `SECTIONS` hold cases; every case
has a short, unique `description` (no "should" / "test that" wording) and exactly one of the
outcome keys its section allows. `x-*` keys hold anchors and are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

CASES_DIR = Path(__file__).resolve().parent / "cases" / "profiles"
REPO_ROOT = CASES_DIR.parents[2]

# file -> section -> (required keys, optional keys, outcome keys: exactly one present)
SECTIONS: dict[str, dict[str, tuple[set[str], set[str], set[str]]]] = {
    "matrix.yaml": {
        "cases": ({"profile", "platform"}, set(), {"expect", "error"}),
        "override_cases": ({"profile", "platform", "overrides"}, set(), {"expect", "error"}),
    },
    "flags.yaml": {"cases": ({"profile", "platform"}, {"overrides"}, {"expect", "error"})},
    "overlays.yaml": {
        "cases": ({"files", "profile", "platform"}, {"overrides"}, {"expect", "error"}),
        "anchor_cases": ({"file", "mutate", "same_anchor"}, set(), set()),
    },
    "sampling.yaml": {
        "cases": ({"runner", "params"}, set(), {"accepted", "error"}),
        "profile_cases": ({"file", "platform"}, set(), {"accepted", "error"}),
    },
    "precedence.yaml": {
        "deploy_rules": ({"name"}, set(), set()),
        "runner_rules": ({"name"}, set(), set()),
    },
}
BANNED_WORDING = ("should", "test that")


def load_file(name: str) -> dict[str, Any]:
    with open(CASES_DIR / name, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    if not isinstance(doc, dict):
        raise ValueError(f"{name}: a case file must be a mapping")
    return doc


def check_file(name: str) -> None:
    """Raise ValueError if a case file breaks the conventions above."""
    doc = load_file(name)
    sections = SECTIONS[name]
    for key in doc:
        if key not in sections and not key.startswith("x-") and not (name == "overlays.yaml" and key == "base"):
            raise ValueError(f"{name}: unknown top-level key {key!r}")
    seen: set[str] = set()
    for section, (required, optional, outcomes) in sections.items():
        for i, case in enumerate(doc.get(section, [])):
            where = f"{name}: {section}[{i}]"
            if not isinstance(case, dict):
                raise ValueError(f"{where}: a case must be a mapping")
            desc = case.get("description")
            if not isinstance(desc, str) or not desc:
                raise ValueError(f"{where}: missing description")
            if desc in seen:
                raise ValueError(f"{where}: duplicate description {desc!r}")
            seen.add(desc)
            if any(w in desc.lower() for w in BANNED_WORDING):
                raise ValueError(f"{where}: {desc!r}: state the behaviour, no 'should'/'test that'")
            keys = set(case) - {"description"}
            missing, unknown = required - keys, keys - required - optional - outcomes
            if missing or unknown:
                raise ValueError(f"{where}: missing {sorted(missing)}, unknown {sorted(unknown)}")
            if outcomes and len(keys & outcomes) != 1:
                raise ValueError(f"{where}: exactly one of {sorted(outcomes)}")


def cases(name: str, section: str = "cases") -> list[Any]:
    """pytest params for one section, id = description."""
    check_file(name)
    return [pytest.param(c, id=c["description"]) for c in load_file(name).get(section, [])]


def fill(text: Any, directory: str) -> Any:
    """Substitute {dir} (the case's temporary directory) and REPO (the repo root) in expected text."""
    if isinstance(text, str):
        return text.replace("{dir}", directory).replace("REPO", str(REPO_ROOT))
    if isinstance(text, dict):
        return {k: fill(v, directory) for k, v in text.items()}
    if isinstance(text, list):
        return [fill(v, directory) for v in text]
    return text
