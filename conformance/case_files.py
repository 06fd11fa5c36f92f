"""Every case file under conformance/cases/, read one way.

A kind of case file is `<area>/<stem>`: the file conformance/cases/<area>/<stem>.yaml and its
JSON Schema conformance/schemas/<area>/<stem>.json (draft 2020-12; shared definitions in
conformance/schemas/common.json). `load(kind)` parses the YAML (every alias of an anchor comes
back as an independent copy), validates it against the schema, then checks the conventions the
schemas cannot express:

- a case is a mapping with an `id` (snake_case) and a `description`; ids are unique within their
  list, and the pytest id of a case is its `id`;
- a description states the behaviour: no "should" / "test that" wording;
- top-level `x-*` keys hold YAML anchors and carry no cases.

Every error names the file and the key path. `python -m conformance.case_files` (tox -e sanity)
checks every case file, and that every case file has a schema and every schema a case file.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from reference.deploy.loader import independent_copy  # every alias of an anchor its own copy

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "conformance" / "cases"
SCHEMAS_DIR = ROOT / "conformance" / "schemas"
BANNED_WORDING = ("should", "test that")


class CaseFileError(ValueError):
    """A case file that breaks its schema or the suite's conventions."""


def read_yaml(path: Path) -> Any:
    try:
        return independent_copy(yaml.safe_load(path.read_text(encoding="utf-8")))
    except yaml.YAMLError as exc:
        raise CaseFileError(f"{display(path)}: not valid YAML: {exc}") from None


def display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


@functools.cache
def _registry() -> Registry:
    resources = [
        (p.relative_to(SCHEMAS_DIR).as_posix(), Resource.from_contents(json.loads(p.read_text())))
        for p in SCHEMAS_DIR.rglob("*.json")
    ]
    return Registry().with_resources(resources)


def schema_for(kind: str) -> dict:
    path = SCHEMAS_DIR / f"{kind}.json"
    if not path.is_file():
        raise CaseFileError(f"conformance/cases/{kind}.yaml: no schema (write conformance/schemas/{kind}.json)")
    return json.loads(path.read_text())


def _where(path: Path, key_path) -> str:
    keys = "/".join(str(k) for k in key_path)
    return f"{display(path)}: {keys or '(top level)'}"


def validate(doc: Any, schema: dict, path: Path) -> None:
    """Schema errors (the first, deepest-path first) and the case conventions; raises CaseFileError."""
    validator = Draft202012Validator(schema, registry=_registry())
    errors = sorted(validator.iter_errors(doc), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        error = errors[-1]
        raise CaseFileError(f"{_where(path, error.absolute_path)}: {error.message}")
    _check_conventions(doc, path, ())


def _check_conventions(node: Any, path: Path, key_path: tuple) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if not (key_path == () and str(key).startswith("x-")):
                _check_conventions(value, path, key_path + (key,))
        return
    if not isinstance(node, list):
        return
    seen: set[str] = set()
    for i, item in enumerate(node):
        if isinstance(item, dict) and "description" in item:
            case_id, text = item.get("id"), item["description"]
            if case_id in seen:
                raise CaseFileError(f"{_where(path, key_path + (i, 'id'))}: id {case_id!r} repeats within the list")
            seen.add(case_id)
            if any(w in str(text).lower() for w in BANNED_WORDING):
                raise CaseFileError(
                    f"{_where(path, key_path + (i, 'description'))}: {text!r}: state the behaviour, "
                    "no 'should' / 'test that'"
                )
        _check_conventions(item, path, key_path + (i,))


@functools.cache
def _load(kind: str) -> str:
    path = CASES_DIR / f"{kind}.yaml"
    if not path.is_file():
        raise CaseFileError(f"no case file conformance/cases/{kind}.yaml")
    doc = read_yaml(path)
    validate(doc, schema_for(kind), path)
    return json.dumps(doc)  # cached as text: every caller gets its own copy


def load(kind: str) -> dict[str, Any]:
    """The validated document of conformance/cases/<kind>.yaml (a fresh copy per call)."""
    return json.loads(_load(kind))


def params(kind: str, section: str = "cases", marks=None) -> list:
    """pytest params of one list of cases; the id of each is the case's `id`.
    `marks(case)` may return pytest marks for a case (a skip with its reason, say)."""
    return [pytest.param(c, id=c["id"], marks=marks(c) if marks else ()) for c in load(kind)[section]]


def all_kinds() -> list[str]:
    return sorted(p.relative_to(CASES_DIR).with_suffix("").as_posix() for p in CASES_DIR.rglob("*.yaml"))


def check_all() -> list[str]:
    """Every problem of every case file and schema, one line each (empty: all valid)."""
    problems = []
    for kind in all_kinds():
        try:
            _load(kind)
        except CaseFileError as exc:
            problems.append(str(exc))
    schemas = {p.relative_to(SCHEMAS_DIR).with_suffix("").as_posix() for p in SCHEMAS_DIR.rglob("*.json")}
    for orphan in sorted(schemas - set(all_kinds()) - {"common"}):
        problems.append(f"conformance/schemas/{orphan}.json: no case file conformance/cases/{orphan}.yaml")
    return problems


def main() -> int:
    problems = check_all()
    for line in problems:
        print(line, file=sys.stderr)
    print(f"{len(all_kinds())} case files: {'all valid' if not problems else f'{len(problems)} invalid'}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
