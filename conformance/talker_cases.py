"""The talker case files (conformance/cases/talker/) and the oracle goldens (golden/talker/).

Shared by the golden writer (conformance/regen_talker.py) and the conformance checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from conformance import case_files
from reference.speech import SpeechRequest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_PATH = ROOT / "golden" / "talker" / "streams.json"


def load_prompts() -> dict[str, Any]:
    return case_files.load("talker/prompts")


def load_engine_runs() -> dict[str, Any]:
    """engine_runs.yaml, with its references checked (what its schema cannot see)."""
    doc = case_files.load("talker/engine_runs")
    known = {p["id"] for p in load_prompts()["prompts"]}
    for run in doc["runs"]:
        if run["engine"] not in doc["engines"]:
            raise ValueError(f"engine_runs.yaml: run {run['id']} names unknown engine {run['engine']!r}")
        unknown = {pid for batch in run["batches"] for pid in batch} - known
        if unknown:
            raise ValueError(f"engine_runs.yaml: run {run['id']} names unknown prompts {sorted(unknown)}")
    return doc


def reference_codes(ref: dict[str, Any]) -> list[list[int]]:
    """Reference audio codes [8, frames] from a seed (stands in for an encoded reference clip)."""
    rng = np.random.default_rng(int(ref["seed"]))
    return rng.integers(0, 1024, size=(8, int(ref["frames"]))).tolist()


def speech_request(prompt: dict[str, Any], max_tokens: int, sampling: dict | None = None) -> SpeechRequest:
    ref = prompt.get("ref")
    return SpeechRequest(
        text=prompt["text"],
        ref_codes=reference_codes(ref) if ref else None,
        ref_text=prompt.get("ref_text"),
        sampling={"temperature": 0.0, "max_tokens": max_tokens, **(sampling or {})},
    )


def load_goldens() -> dict[str, Any]:
    if not GOLDEN_PATH.exists():
        raise FileNotFoundError(f"{GOLDEN_PATH} is missing: regenerate it with `tox -e regen`")
    return json.loads(GOLDEN_PATH.read_text())
