"""The codec decode check: every codec golden case decoded by a foreign codec, PCM against ours.

The input of a case is its real frames [8, T] (conformance/codec/codec_cases.py; a `rows` case's
frames, the rows being the delay check's business). The weights are the golden's: the seeded
"tiny" fixture codec (higgs_dummy.codec_weights), handed over in the foreign layout by the adapter.
Each foreign PCM is judged twice:
- against the golden (golden/codec/<case>.json) with the case's own tolerance (its `max_abs` on
  every summary value), exactly as the reference is judged (conformance/codec/test_codec_golden.py);
- against the oracle's whole float64 decode (conformance/oracles/codec_numpy.py): max abs error
  and SNR in dB, reported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.codec import codec_cases
from conformance.differential.verdicts import ROOT, Check
from conformance.oracles import codec_numpy

DECODE_CASES = ROOT / "conformance" / "cases" / "codec" / "decode.yaml"
TOLERANCE = "each case's golden tolerance (max_abs 2e-5 on every summary value)"


@functools.cache
def _doc() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(DECODE_CASES.read_text())


def cases() -> list[dict[str, Any]]:
    return _doc()["cases"]


@functools.cache
def fixture_state() -> dict[str, Any]:
    """The golden's codec tensors, transformers layout (torch float32)."""
    from higgs_dummy.codec_weights import codec_config, codec_state_dict

    spec = _doc()["codec"]
    return codec_state_dict(codec_config(spec["size"]), int(spec["seed"]))


def fixture_config() -> dict[str, Any]:
    from higgs_dummy.codec_weights import codec_config

    return codec_config(_doc()["codec"]["size"])


def snr_db(reference: np.ndarray, test: np.ndarray) -> float:
    noise = float(np.sum((reference - test) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(reference**2)) / noise)


def judge(case: dict[str, Any], pcm: np.ndarray) -> tuple[str | None, str]:
    """(difference id or None, detail) of one foreign decode against the golden and the oracle."""
    pcm = np.asarray(pcm, dtype=np.float64).reshape(-1)
    frames = codec_cases.expected_frames(case)
    golden = codec_cases.read_golden(case["id"])
    fmt = golden["summary_format"]
    summary = codec_cases.summarize(pcm, fmt["hop_samples"], fmt["head_samples"], fmt["probe_stride"])
    problems = codec_cases.compare(summary, golden["summary"], float(case["tolerance"]["max_abs"]))
    state = {k: v.numpy() for k, v in fixture_state().items()}
    oracle = codec_numpy.decode(frames, state)
    if len(oracle) != len(pcm):
        return "num_samples", f"{len(pcm)} samples, the oracle {len(oracle)}; golden: {'; '.join(problems)}"
    err = float(np.max(np.abs(oracle - pcm))) if len(pcm) else 0.0
    detail = f"max |err| {err:.2e}, SNR {snr_db(oracle, pcm):.1f} dB vs the oracle"
    if problems:
        return "pcm", detail + "; golden: " + "; ".join(problems[:3])
    return None, detail + "; golden summary within tolerance"


def run(decode: Callable[[np.ndarray], np.ndarray]) -> Check:
    """decode(frames int64 [8, T]) -> PCM [T * 960] for every codec golden case."""
    check = Check("codec_decode", TOLERANCE)
    for case in cases():
        difference, detail = judge(case, decode(codec_cases.expected_frames(case)))
        check.add(case["id"], difference, detail)
    return check
