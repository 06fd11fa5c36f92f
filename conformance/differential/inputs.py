"""The seeded inputs of the differential checks (conformance/cases/differential/inputs.yaml).

Read with PyYAML alone (no jsonschema: the adapters run beside foreign pins; `tox -e sanity`
validates the file). Numpy only.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
INPUTS_FILE = ROOT / "conformance" / "cases" / "differential" / "inputs.yaml"
NUM_CODEBOOKS, VOCAB, BOC, EOC = 8, 1026, 1024, 1025  # the differential side's own copies
SPIKE = 20.0  # how far a spiked (or suppressed) BOC / EOC logit sits from every other logit


@functools.cache
def _doc() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(INPUTS_FILE.read_text())


def delay_grids() -> list[tuple[str, np.ndarray]]:
    """(id, codes int64 [8, T]) for every length of the case file, grids_per_length each."""
    spec = _doc()["delay_pattern"]
    rng = np.random.default_rng(int(spec["seed"]))
    grids = []
    for t in range(int(spec["lengths"]["first"]), int(spec["lengths"]["last"]) + 1):
        for i in range(int(spec["grids_per_length"])):
            grids.append((f"T{t}_{i}", rng.integers(0, 1024, size=(NUM_CODEBOOKS, t)).astype(np.int64)))
    return grids


def scenarios() -> list[dict[str, Any]]:
    return _doc()["state_machine"]["scenarios"]


def scenario_logits(scenario: dict[str, Any]) -> np.ndarray:
    """float32 [steps, 8, 1026]: standard normal; BOC and EOC far below unless spiked far above."""
    steps = int(_doc()["state_machine"]["steps"])
    logits = np.random.default_rng(int(scenario["seed"])).standard_normal((steps, NUM_CODEBOOKS, VOCAB))
    logits[:, :, BOC] = logits[:, :, :1024].min(axis=2) - SPIKE
    logits[:, :, EOC] = logits[:, :, :1024].min(axis=2) - SPIKE
    for spike in scenario["spikes"]:
        step, q = int(spike["step"]), int(spike["codebook"])
        code = BOC if spike["code"] == "boc" else EOC
        logits[step, q, code] = logits[step, q, :1024].max() + SPIKE
    return logits.astype(np.float32)


def encoder_clips() -> tuple[int, list[tuple[str, np.ndarray]]]:
    """(sample rate, [(id, float32 PCM [N])]): a gliding tone in seeded noise per clip."""
    spec = _doc()["encoder"]
    rate = int(spec["sample_rate"])
    clips = []
    for clip in spec["clips"]:
        t = np.arange(int(clip["samples"])) / rate
        noise = np.random.default_rng(int(clip["seed"])).standard_normal(len(t))
        clips.append((clip["id"], (0.1 * np.sin(2 * np.pi * (120 * t + 15 * t**2)) + 0.02 * noise).astype(np.float32)))
    return rate, clips
