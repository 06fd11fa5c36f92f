"""Streamed code2wav against the offline decode, per geometry (conformance/cases/codec/streaming.yaml)."""

from __future__ import annotations

import functools

import pytest
import torch

from conformance import case_files, codec_cases
from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from reference.codec.geometry import DEFAULT_GEOMETRY, StreamGeometry
from reference.codec.streaming import agreement, stitched_stream

pytestmark = pytest.mark.cpu

DOC = case_files.load("codec/streaming")
GEOMETRIES = {g["id"]: g for g in DOC["geometries"]}
CODECS = [
    pytest.param(c, id=c["size"], marks=[pytest.mark.slow] if c.get("slow") else [])
    for c in DOC["codecs"]
]


@pytest.fixture(autouse=True)
def _single_thread():
    with one_torch_thread():
        yield


@functools.lru_cache(maxsize=2)
def offline(size: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    codes = torch.from_numpy(codec_cases.build_codes(DOC["codes"]))  # [8, T]
    return codes, fixture_codec(size, seed).decode(codes)  # [T * 960]


def test_streaming_cases_cover_the_shipped_geometry_and_both_outcomes():
    assert StreamGeometry(**GEOMETRIES["default"]["geometry"]) == DEFAULT_GEOMETRY
    assert {g["expect"] for g in DOC["geometries"]} >= {"meets_bound", "violates_bound"}


@pytest.mark.parametrize("codec_spec", CODECS)
@pytest.mark.parametrize("geometry_id", list(GEOMETRIES))
def test_stream_vs_offline(codec_spec, geometry_id, record_property):
    case, bound = GEOMETRIES[geometry_id], DOC["bound"]
    codes, reference = offline(codec_spec["size"], int(codec_spec["seed"]))
    geometry = StreamGeometry(**case["geometry"])
    stream = stitched_stream(fixture_codec(codec_spec["size"], int(codec_spec["seed"])), codes, geometry)
    result = agreement(stream, reference)
    g = geometry
    print(f"stream-vs-offline {codec_spec['size']} {geometry_id} "
          f"({g.first_chunk_frames}/{g.chunk_frames}/{g.left_context_frames}/{g.right_holdback_frames}): {result}")
    # A figure for the upgrade gate (conformance/gate.py), with the case's tolerance.
    record_property("figure:snr_db", {"value": round(result.snr_db, 2), "unit": "dB",
                                      "tolerance": case["measured"]["tolerance_db"]})
    meets = result.snr_db >= bound["min_snr_db"] and result.max_abs_err <= bound["max_abs_err"]
    if case["expect"] == "meets_bound":
        limit = f"bound SNR >= {bound['min_snr_db']} dB, max abs err <= {bound['max_abs_err']}"
        assert meets, f"{geometry_id}: {result}; {limit}"
    elif case["expect"] == "violates_bound":
        assert not meets, f"{geometry_id} must miss the bound (else the check cannot fail): {result}"
    recorded, tolerance = case["measured"][codec_spec["size"]], case["measured"]["tolerance_db"]
    assert abs(result.snr_db - recorded["snr_db"]) <= tolerance, (
        f"{geometry_id} on the {codec_spec['size']} codec: {result}, the case file records "
        f"{recorded['snr_db']} dB (tolerance {tolerance} dB): update `measured` if the change is intended"
    )
