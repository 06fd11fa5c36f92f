"""Every planted defect of the mutation runners (conformance/mutations/*.py) still finds the
text it replaces exactly once: a runner whose target text moved plants nothing, and its defect
would read as "not caught" (or be skipped) instead of proving a check."""

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TABLES = {
    "serving": ["MUTATIONS"],
    "talker": ["MUTATIONS"],
    "deploy": ["MUTATIONS", "BOOT_MUTATIONS"],
    "gpu": ["MUTATIONS", "PARALLEL_MUTATIONS"],
    "quality": ["MUTATIONS"],
}
ROWS = [(module, row) for module, names in TABLES.items() for name in names
        for row in getattr(importlib.import_module(f"conformance.mutations.{module}"), name)]


@pytest.mark.parametrize("module, row", ROWS, ids=[f"{m}:{i}" for i, (m, _) in enumerate(ROWS)])
def test_each_planted_defect_finds_its_text_once(module, row):
    name, path, old = row[:3]
    count = (ROOT / path).read_text().count(old)
    assert count == 1, f"{module}: {name!r}: the text to replace occurs {count} times in {path}"
