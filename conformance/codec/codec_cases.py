"""The codec cases' inputs (conformance/cases/codec/) and the golden summary format.

Shared by the golden writer (`conformance/tools/regen_codec.py`) and the tests; it decodes nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from conformance.oracles import delay_numpy
from conformance.oracles.delay_numpy import EOC

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = ROOT / "golden" / "codec"
NUM_CODEBOOKS = 8  # the oracle side's own copy, on purpose (independent of reference/)


def build_codes(spec: dict[str, Any]) -> np.ndarray:
    """A codes spec -> int64 [8, T]."""
    frames, kind = int(spec["frames"]), spec["kind"]
    q = np.arange(NUM_CODEBOOKS)[:, None]
    t = np.arange(frames)[None, :]
    if kind == "random":
        return np.random.default_rng(int(spec["seed"])).integers(0, 1024, size=(NUM_CODEBOOKS, frames)).astype(np.int64)
    if kind == "constant":
        return np.full((NUM_CODEBOOKS, frames), int(spec["value"]), dtype=np.int64)
    if kind == "ramp":
        return ((spec["start"] + spec["step"] * t + spec["codebook_step"] * q) % 1024).astype(np.int64)
    if kind == "cycle":
        values = np.asarray(spec["values"], dtype=np.int64)
        return values[(q + t) % len(values)]
    raise ValueError(f"unknown codes kind {kind!r} (conformance/schemas/codec/decode.json lists them)")


def expected_frames(case: dict[str, Any]) -> np.ndarray:
    """The real frames [8, T] a case decodes (what the golden was made from)."""
    return build_codes(case["codes"])


def case_rows(case: dict[str, Any]) -> np.ndarray:
    """For an `input: rows` case: the talker rows [L, 8], partial trailing frame included."""
    frames = build_codes(case["codes"])
    partial = case.get("partial_frame")
    if partial:
        extra = np.random.default_rng(int(partial["seed"])).integers(0, 1024, size=(NUM_CODEBOOKS, 1))
        extra[: int(partial["eoc_through_codebook"]) + 1] = EOC
        frames = np.concatenate([frames, extra], axis=1)
    return delay_numpy.delayed_rows(frames)


def summarize(pcm: np.ndarray, hop: int, head: int, probe_stride: int) -> dict[str, Any]:
    """A PCM [N] -> the golden summary (float64 values)."""
    x = np.asarray(pcm, dtype=np.float64)
    frames = x[: len(x) // hop * hop].reshape(-1, hop)
    return {
        "num_samples": int(len(x)),
        "rms": float(np.sqrt(np.mean(x * x))) if len(x) else 0.0,
        "peak": float(np.max(np.abs(x))) if len(x) else 0.0,
        "frame_rms": np.sqrt(np.mean(frames * frames, axis=1)).tolist(),
        "head": x[:head].tolist(),
        "tail": x[-head:].tolist() if len(x) else [],
        "probe": x[::probe_stride].tolist(),
    }


def compare(summary: dict[str, Any], golden: dict[str, Any], max_abs: float) -> list[str]:
    """Every summary field outside the tolerance, as readable lines (empty: within tolerance)."""
    if summary["num_samples"] != golden["num_samples"]:
        return [f"num_samples {summary['num_samples']} != golden {golden['num_samples']}"]
    problems = []
    for key in ("rms", "peak", "frame_rms", "head", "tail", "probe"):
        got, want = np.atleast_1d(summary[key]), np.atleast_1d(golden[key])
        if got.shape != want.shape:
            problems.append(f"{key}: {got.shape[0]} values, golden has {want.shape[0]}")
            continue
        err = np.abs(got - want)
        if err.size and err.max() > max_abs:
            i = int(err.argmax())
            problems.append(f"{key}[{i}]: {got[i]:.7g} vs golden {want[i]:.7g} (|diff| {err[i]:.3g} > {max_abs:g})")
    return problems


def weights_fingerprint(state: dict[str, np.ndarray]) -> dict[str, str]:
    """Per tensor, one line: dtype, shape, and the float64 sum and sum of magnitudes of its values.

    Not a hash of the bytes: torch draws the dummy weights with a normal sampler that ATen vectorises
    per CPU capability, so one seed gives weights that agree to float32 rounding, not bit for bit,
    across machines (docs/figures.md). A changed fixture moves the sums by far more than that.
    """
    out = {}
    for name in sorted(state):
        a = np.asarray(state[name])
        values = a.astype(np.float64)
        shape = "x".join(map(str, a.shape)) or "scalar"
        out[name] = f"{a.dtype.str} {shape} {values.sum():.12e} {np.abs(values).sum():.12e}"
    return out


WEIGHTS_RTOL = 1e-5  # of a tensor's sum of magnitudes; float32 rounding moves the sums by ~1e-7 of it


def fingerprint_differences(got: dict[str, str], want: dict[str, str]) -> list[str]:
    """Every tensor whose fingerprint differs beyond float32 rounding, as readable lines."""
    problems = [f"{name}: only in {'the golden' if name in want else 'the fixture'}"
                for name in sorted(set(got) ^ set(want))]
    for name in sorted(set(got) & set(want)):
        dtype, shape, total, magnitude = got[name].split()
        want_dtype, want_shape, want_total, want_magnitude = want[name].split()
        moved = max(abs(float(total) - float(want_total)), abs(float(magnitude) - float(want_magnitude)))
        if (dtype, shape) != (want_dtype, want_shape) or moved > WEIGHTS_RTOL * float(want_magnitude):
            problems.append(f"{name}: {got[name]}, golden {want[name]}")
    return problems


def codes_sha256(codes: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(codes, dtype="<i8").tobytes()).hexdigest()


def golden_path(case_id: str, golden_dir: Path = GOLDEN_DIR) -> Path:
    return Path(golden_dir) / f"{case_id}.json"


def read_golden(case_id: str, golden_dir: Path = GOLDEN_DIR) -> dict[str, Any]:
    path = golden_path(case_id, golden_dir)
    if not path.is_file():
        raise FileNotFoundError(
            f"no golden {path}: regenerate the goldens with `tox -e regen`"
        )
    return json.loads(path.read_text())
