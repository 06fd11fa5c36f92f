"""Writes the codec goldens (golden/codec/<case id>.json) from the independent numpy oracle.

    python -m conformance.tools.regen_codec [OUT_DIR]

The only writer of golden/codec. Each golden holds a summary of the oracle's float64 decode of one
case of conformance/cases/codec/decode.yaml on the seeded "tiny" fixture codec, the case's
tolerance, and its provenance (oracle module, numpy/python versions, dtype, the weights' fingerprint).
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

from conformance import case_files
from conformance.codec import codec_cases
from conformance.oracles import codec_numpy


def fixture_weights(codec: dict[str, Any]) -> dict[str, np.ndarray]:
    """The fixture codec's tensors (transformers layout) as float32 numpy arrays."""
    from higgs_dummy.codec_weights import codec_config, codec_state_dict

    state = codec_state_dict(codec_config(codec["size"]), int(codec["seed"]))
    return {name: tensor.numpy() for name, tensor in state.items()}


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def golden_for_case(
    case: dict[str, Any], doc: dict[str, Any], state: dict[str, np.ndarray], fingerprint: dict[str, str]
) -> dict[str, Any]:
    frames = codec_cases.expected_frames(case)
    pcm = codec_numpy.decode(frames, state)  # [T * 960] float64
    fmt = doc["summary"]
    summary = codec_cases.summarize(pcm, len(pcm) // frames.shape[1], fmt["head_samples"], fmt["probe_stride"])
    return {
        "case": case["id"],
        "description": case["description"],
        "input": case["input"],
        "num_frames": int(frames.shape[1]),
        "codes_sha256": codec_cases.codes_sha256(frames),
        "tolerance": {"max_abs": float(case["tolerance"]["max_abs"]),
                      "applies_to": "every value of summary: rms, peak, frame_rms, head, tail, probe"},
        "summary_format": {"hop_samples": len(pcm) // frames.shape[1], "head_samples": fmt["head_samples"],
                           "probe_stride": fmt["probe_stride"],
                           "frame_rms": "RMS of each 960-sample frame", "probe": "pcm[::probe_stride]"},
        "provenance": {
            "generator": "conformance.oracles.codec_numpy (independent numpy oracle, not the code under test)",
            "regenerate": "tox -e regen",
            "dtype": "float64",
            "python": platform.python_version(),
            "numpy": np.__version__,
            "codec_weights": dict(doc["codec"], layout="transformers", fingerprint=fingerprint),
        },
        "summary": _rounded(summary),
    }


def main(out_dir: str | Path | None = None) -> list[Path]:
    """Writes one golden per decode case into out_dir, the codec golden folder (default golden/codec).

    Removes codec goldens (and only those) left in out_dir by cases that no longer exist.
    """
    out = Path(out_dir) if out_dir is not None else codec_cases.GOLDEN_DIR
    out.mkdir(parents=True, exist_ok=True)
    doc = case_files.load("codec/decode")
    state = fixture_weights(doc["codec"])
    fingerprint = codec_cases.weights_fingerprint(state)
    written = []
    for case in doc["cases"]:
        path = codec_cases.golden_path(case["id"], out)
        path.write_text(json.dumps(golden_for_case(case, doc, state, fingerprint), indent=1) + "\n")
        written.append(path)
    for path in sorted(set(out.glob("*.json")) - set(written)):  # goldens of cases that no longer exist
        if _is_codec_golden(path):
            path.unlink()
    return written


def _is_codec_golden(path: Path) -> bool:
    try:
        generator = json.loads(path.read_text())["provenance"]["generator"]
    except (ValueError, KeyError, TypeError):
        return False
    return str(generator).startswith("conformance.oracles.codec_numpy")


if __name__ == "__main__":
    for p in main(sys.argv[1] if len(sys.argv) > 1 else None):
        print(p)
