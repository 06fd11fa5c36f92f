"""reference.codec against the independent oracle's goldens (conformance/cases/codec/decode.yaml).

Also shows that the comparison can fail: a nudged weight, a kept tanh, swapped codebooks and
delay-pattern defects (off-by-one revert, filtering before the revert) all break it.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch import nn

from conformance import case_files
from conformance.codec import codec_cases
from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from conformance.oracles import codec_numpy
from higgs_dummy.codec_weights import codec_config, codec_state_dict, to_boson_layout
from reference.codec import delay_pattern
from reference.codec.model import Codec

pytestmark = pytest.mark.cpu

DOC = case_files.load("codec/decode")
CASES = {case["id"]: case for case in DOC["cases"]}
ROWS_CASES = [cid for cid, case in CASES.items() if case["input"] == "rows"]


@pytest.fixture(autouse=True)
def _single_thread():
    with one_torch_thread():
        yield


def doc_codec() -> Codec:
    return fixture_codec(DOC["codec"]["size"], int(DOC["codec"]["seed"]))


def reference_pcm(codec: Codec, case: dict, rows_to_frames: Callable = delay_pattern.rows_to_frames) -> np.ndarray:
    """The case's input through the reference path: (revert + real frames, for rows) then decode."""
    if case["input"] == "rows":
        frames = rows_to_frames(torch.from_numpy(codec_cases.case_rows(case)))
    else:
        frames = torch.from_numpy(codec_cases.expected_frames(case))
    return codec.decode(frames).double().numpy()


def check(codec: Codec, case: dict, **kwargs) -> list[str]:
    golden = codec_cases.read_golden(case["id"])
    fmt = golden["summary_format"]
    pcm = reference_pcm(codec, case, **kwargs)
    summary = codec_cases.summarize(pcm, fmt["hop_samples"], fmt["head_samples"], fmt["probe_stride"])
    return codec_cases.compare(summary, golden["summary"], golden["tolerance"]["max_abs"])


def test_every_case_has_a_golden_and_every_golden_a_case():
    on_disk = {p.stem for p in codec_cases.GOLDEN_DIR.glob("*.json")}
    assert on_disk == set(CASES), "regenerate with `tox -e regen` (conformance/tools/regen_codec.py)"


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_golden_is_current(case_id):
    golden, case = codec_cases.read_golden(case_id), CASES[case_id]
    assert golden["tolerance"]["max_abs"] == float(case["tolerance"]["max_abs"]), "tolerance differs from decode.yaml"
    assert golden["codes_sha256"] == codec_cases.codes_sha256(codec_cases.expected_frames(case)), "case codes changed"
    weights = codec_state_dict(codec_config(DOC["codec"]["size"]), int(DOC["codec"]["seed"]))
    fingerprint = codec_cases.weights_fingerprint({k: v.numpy() for k, v in weights.items()})
    changed = codec_cases.fingerprint_differences(fingerprint, golden["provenance"]["codec_weights"]["fingerprint"])
    assert not changed, "fixture codec weights changed, regenerate the goldens (tox -e regen):\n" + "\n".join(changed)
    assert golden["provenance"]["generator"].startswith("conformance.oracles.codec_numpy")


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_reference_decode_matches_golden(case_id):
    problems = check(doc_codec(), CASES[case_id])
    assert not problems, "\n".join(problems)


def test_oracle_is_independent_of_the_code_under_test():
    probe = ("import sys, conformance.oracles.codec_numpy, conformance.oracles.delay_numpy; "
             "print(sorted(m for m in ('torch', 'transformers', 'reference') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=codec_cases.ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_oracle_reads_the_boson_layout_alike():
    cfg = codec_config(DOC["codec"]["size"])
    weights = codec_state_dict(cfg, int(DOC["codec"]["seed"]))
    frames = codec_cases.expected_frames(CASES["short_random"])
    plain = codec_numpy.decode(frames, {k: v.numpy() for k, v in weights.items()})
    boson = codec_numpy.decode(frames, {k: v.numpy() for k, v in to_boson_layout(weights, cfg).items()})
    np.testing.assert_allclose(boson, plain, atol=1e-6, rtol=0)


def _nudged(codec: Codec) -> Codec:
    bad = copy.deepcopy(codec)
    with torch.no_grad():
        bad.acoustic_decoder.block[2].res_unit2.conv1.weight[0, 0, 3] += 1e-3  # one weight of ~10^5
    return bad


def _tanh_kept(codec: Codec) -> Codec:
    bad = copy.deepcopy(codec)
    bad.acoustic_decoder.tanh = nn.Tanh()
    return bad


def _codebooks_swapped(codec: Codec) -> Codec:
    bad = copy.deepcopy(codec)
    with torch.no_grad():
        bad.codebooks[[3, 4]] = bad.codebooks[[4, 3]].clone()
    return bad


@pytest.mark.parametrize("defect", [_nudged, _tanh_kept, _codebooks_swapped], ids=lambda f: f.__name__.strip("_"))
def test_a_perturbed_codec_fails_the_comparison(defect):
    problems = check(defect(doc_codec()), CASES["medium_random"])
    assert problems, f"{defect.__name__} went unnoticed by the golden comparison"


def _revert_off_by_one(rows: torch.Tensor) -> torch.Tensor:
    """Codebook q reads rows q + 1 .. (a shift by one too many)."""
    padded = torch.cat([rows, torch.full((1, 8), delay_pattern.EOC, dtype=rows.dtype)])
    return delay_pattern.real_frames(delay_pattern.revert_delay(padded[1:]))


def _revert_one_codebook_early(rows: torch.Tensor) -> torch.Tensor:
    """Codebook 7 read one row early (delay 6), the others right."""
    frames = delay_pattern.revert_delay(rows)
    frames[7] = rows[6 : 6 + frames.shape[1], 7]
    return delay_pattern.real_frames(frames)


def _revert_one_codebook_late_clamped(rows: torch.Tensor) -> torch.Tensor:
    """Codebook 7 read one row late (delay 8), the index clamped to the last row: same frame count."""
    frames = delay_pattern.revert_delay(rows)
    late = (torch.arange(frames.shape[1]) + 8).clamp(max=rows.shape[0] - 1)
    frames[7] = rows[late, 7]
    return delay_pattern.real_frames(frames)


def _filter_before_revert(rows: torch.Tensor) -> torch.Tensor:
    kept = rows[((rows >= 0) & (rows < 1024)).all(1)]
    return delay_pattern.real_frames(delay_pattern.revert_delay(kept)) if len(kept) >= 7 else kept.T[:, :0]


@pytest.mark.parametrize("case_id", ROWS_CASES)
@pytest.mark.parametrize(
    "defect",
    [_revert_off_by_one, _revert_one_codebook_early, _revert_one_codebook_late_clamped, _filter_before_revert],
    ids=lambda f: f.__name__.strip("_"),
)
def test_a_delay_pattern_defect_fails_the_comparison(case_id, defect):
    assert check(doc_codec(), CASES[case_id], rows_to_frames=defect)
