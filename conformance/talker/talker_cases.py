"""The talker case files (conformance/cases/talker/) and the oracle goldens (golden/talker/).

Shared by the golden writer (conformance/tools/regen_talker.py) and the conformance checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from conformance import case_files
from reference.speech import SpeechRequest

ROOT = Path(__file__).resolve().parents[2]
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


REF_AUDIO_RATE = 24000


def reference_audio(spec: dict[str, Any]) -> np.ndarray:
    """Reference audio [seconds * 24000] float32 from a seed (noise at a tenth of full scale)."""
    rng = np.random.default_rng(int(spec["seed"]))
    return (0.1 * rng.standard_normal(round(float(spec["seconds"]) * REF_AUDIO_RATE))).astype(np.float32)


def speech_request(prompt: dict[str, Any], max_tokens: int, sampling: dict | None = None) -> SpeechRequest:
    ref, audio = prompt.get("ref"), prompt.get("ref_audio")
    return SpeechRequest(
        text=prompt["text"],
        ref_codes=reference_codes(ref) if ref else None,
        ref_audio=reference_audio(audio) if audio else None,
        ref_sample_rate=REF_AUDIO_RATE,
        ref_text=prompt.get("ref_text"),
        sampling={"temperature": 0.0, "max_tokens": max_tokens, **(sampling or {})},
    )


def load_goldens() -> dict[str, Any]:
    if not GOLDEN_PATH.exists():
        raise FileNotFoundError(f"{GOLDEN_PATH} is missing: regenerate it with `tox -e regen`")
    return json.loads(GOLDEN_PATH.read_text())


def flavoured_prompts() -> dict[str, list[str]]:
    """Checkpoint flavour -> the prompts that engine runs ask of it (the greedy flavour excluded:
    its goldens cover every prompt)."""
    wanted: dict[str, set[str]] = {}
    for run in load_engine_runs()["runs"]:
        if run.get("flavour", "greedy") != "greedy":
            wanted.setdefault(run["flavour"], set()).update(p for batch in run["batches"] for p in batch)
    return {flavour: sorted(ids) for flavour, ids in sorted(wanted.items())}


def golden_stream(goldens: dict[str, Any], prompt_id: str, flavour: str = "greedy") -> dict[str, Any]:
    if flavour == "greedy":
        return goldens["streams"][prompt_id]
    try:
        return goldens["flavours"][flavour][prompt_id]
    except KeyError:
        raise KeyError(f"no golden for {prompt_id} on the {flavour} checkpoint: regenerate with `tox -e regen`") from None
