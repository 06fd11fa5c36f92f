"""Does a streaming geometry stitch into the offline decode? A check that needs no engine.

The DAC decoder's PCM for a frame depends on `decoder_context_frames` frames on each side
(reference/codec/streaming.py, on the real codec's config, reference/codec/config.py). A
geometry whose left context and holdback both cover that reach makes the stitched stream equal
the offline decode up to float rounding whatever the weights; one frame short costs ~20 dB.

A geometry of conformance/cases/codec/streaming.yaml is quoted by its case id, read as plain data
(no codec, checkpoint or test fixture is needed; without that file nothing is quoted): a lossy one
with the SNR measured for it (`measured`, from `pytest conformance/codec/test_stream_vs_offline.py -s`), an
exact one with the bound it must reach (its SNR above the bound is float noise, no figure).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from reference.codec.config import CodecConfig
from reference.codec.geometry import StreamGeometry


CODEC_CASES = Path(__file__).resolve().parents[2] / "conformance" / "cases" / "codec" / "streaming.yaml"


@dataclass(frozen=True)
class Measured:
    case_id: str  # the geometry's id in conformance/cases/codec/streaming.yaml
    snr_db: dict[str, float]  # codec size ("tiny", "4b") -> SNR dB; empty where the case pins none
    max_abs_err: dict[str, float]
    bound_snr_db: float | None  # the SNR the case requires (a geometry that stitches exactly), else None


@functools.cache
def measured_geometries(path: Path = CODEC_CASES) -> dict[StreamGeometry, Measured]:
    """Every geometry of the codec streaming cases."""
    if not path.is_file():
        return {}
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    out: dict[StreamGeometry, Measured] = {}
    for case in doc.get("geometries", []):
        runs = case.get("measured") or {}
        bound = doc["bound"]["min_snr_db"] if case["expect"] == "meets_bound" else None
        out[StreamGeometry(**case["geometry"])] = Measured(
            case["id"], {k: v["snr_db"] for k, v in runs.items()}, {k: v["max_abs_err"] for k, v in runs.items()}, bound
        )
    return out


@dataclass(frozen=True)
class StreamCheck:
    geometry: StreamGeometry
    needs_left: int  # frames of left context the decoder reaches back
    needs_right: int  # frames of holdback it reaches forward
    measured: Measured | None

    @property
    def left_short(self) -> int:
        return max(0, self.needs_left - self.geometry.left_context_frames)

    @property
    def right_short(self) -> int:
        return max(0, self.needs_right - self.geometry.right_holdback_frames)

    @property
    def exact(self) -> bool:
        """stream = offline up to float rounding."""
        return self.left_short == 0 and self.right_short == 0

    @property
    def shape(self) -> str:
        """first/chunk/left/holdback, in frames."""
        g = self.geometry
        return f"{g.first_chunk_frames}/{g.chunk_frames}/{g.left_context_frames}/{g.right_holdback_frames}"

    @property
    def shortfall(self) -> str:
        """What falls short of the decoder's reach ("" when exact)."""
        short = [f"left context {self.left_short} short"] * bool(self.left_short)
        short += [f"holdback {self.right_short} short"] * bool(self.right_short)
        return ", ".join(short)

    def summary(self) -> str:
        reach = f"decoder reach {self.needs_left} left / {self.needs_right} right"
        if self.exact:
            verdict = "stream = offline (context and holdback cover the reach)"
        else:
            verdict = f"stream != offline at chunk edges ({self.shortfall})"
        text = f"geometry {self.shape} (first/chunk/left/holdback): {reach}: {verdict}"
        if self.measured is not None:
            m = self.measured
            if m.snr_db:
                text += "; measured " + ", ".join(
                    f"{m.snr_db[s]} dB / {m.max_abs_err[s]:.2g} ({s} codec)" for s in m.snr_db
                )
            if m.bound_snr_db is not None:
                text += f"; held to SNR >= {m.bound_snr_db} dB"
            text += f" [conformance/cases/codec/streaming.yaml: {m.case_id}]"
        return text


def check_stream(geometry: StreamGeometry, codec: CodecConfig | None = None) -> StreamCheck:
    """Compare `geometry` with the decoder's reach (the real codec's config unless given)."""
    from reference.codec.streaming import decoder_context_frames

    left, right = decoder_context_frames(codec or CodecConfig())
    return StreamCheck(geometry, left, right, measured_geometries().get(geometry))
