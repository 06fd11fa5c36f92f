"""Streamed code2wav against the offline decode, per geometry (conformance/cases/codec/streaming.yaml)."""

from __future__ import annotations

import functools

import pytest
import torch

from conformance import case_files, figures
from conformance.codec import codec_cases
from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from reference.codec.geometry import DEFAULT_GEOMETRY, StreamGeometry
from reference.codec.carried import CarriedStreamingDecoder, stitched_carried
from reference.codec.streaming import agreement, stitched_stream

pytestmark = pytest.mark.cpu

DOC = case_files.load("codec/streaming")
GEOMETRIES = {g["id"]: g for g in DOC["geometries"]}
# The streaming decoders: every geometry's expectation in the case file is the windowed decoder's
# (reference.codec.streaming); the carried one (reference.codec.carried, each frame decoded once) must
# meet the bound on every meets_bound geometry and refuse every other, naming the decoder's reach.
DECODERS = ["windows", "carried"]
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
    assert DOC["bound"]["min_snr_db"] == figures.FLOAT_FLOOR_SNR_DB, "the bound is the suite's float floor"


def test_every_pinned_snr_is_far_enough_from_the_float_floor_to_mean_the_geometry():
    for g in DOC["geometries"]:
        for size, recorded in g.get("measured", {}).items():
            figures.snr_tolerance_db(recorded["snr_db"])  # raises within 6 dB of the floor


@pytest.mark.parametrize("codec_spec", CODECS)
@pytest.mark.parametrize("geometry_id", list(GEOMETRIES))
@pytest.mark.parametrize("decoder", DECODERS)
def test_stream_vs_offline(decoder, codec_spec, geometry_id, record_property):
    case, bound = GEOMETRIES[geometry_id], DOC["bound"]
    codes, reference = offline(codec_spec["size"], int(codec_spec["seed"]))
    geometry = StreamGeometry(**case["geometry"])
    codec = fixture_codec(codec_spec["size"], int(codec_spec["seed"]))
    if decoder == "carried" and case["expect"] != "meets_bound":
        with pytest.raises(ValueError, match=r"do not cover the decoder's reach \(10 and 10 frames\)"):
            CarriedStreamingDecoder(codec, geometry)
        return
    stream = (stitched_carried if decoder == "carried" else stitched_stream)(codec, codes, geometry)
    result = agreement(stream, reference)
    g = geometry
    print(f"stream-vs-offline {decoder} {codec_spec['size']} {geometry_id} "
          f"({g.first_chunk_frames}/{g.chunk_frames}/{g.left_context_frames}/{g.right_holdback_frames}): {result}")
    meets = result.snr_db >= bound["min_snr_db"] and result.max_abs_err <= bound["max_abs_err"]
    if case["expect"] == "meets_bound":
        limit = f"bound SNR >= {bound['min_snr_db']} dB, max abs err <= {bound['max_abs_err']}"
        assert meets, f"{geometry_id}: {result}; {limit}"
        # Bounded: the SNR above the bound is rounding noise, which differs from CPU to CPU.
        record_property("figure:snr_db", figures.snr_figure(result.snr_db, bound_db=bound["min_snr_db"]))
    elif case["expect"] == "violates_bound":
        assert not meets, f"{geometry_id} must miss the bound (else the check cannot fail): {result}"
    if "measured" in case:
        recorded = case["measured"][codec_spec["size"]]["snr_db"]
        tolerance = figures.recorded_snr_tolerance_db(recorded)
        record_property("figure:snr_db", figures.snr_figure(result.snr_db, bound_db=None))
        assert abs(result.snr_db - recorded) <= tolerance, (
            f"{geometry_id} on the {codec_spec['size']} codec: {result}, the case file records "
            f"{recorded} dB (tolerance {tolerance} dB, derived from the float floor: conformance/figures.py); "
            "update `measured` if the change is intended"
        )
