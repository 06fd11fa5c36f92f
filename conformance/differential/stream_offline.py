"""The stream-vs-offline check: a foreign streaming path's stitched PCM against its own offline decode.

A foreign streaming path cuts one talker stream into codec windows; each window comes with how many
frames its decode is trimmed at the front (`left`, context already played) and at the end (`right`,
held back for the next window). What a window keeps is frames [left, width - right). Per stream:
- frames: the kept frames of every window, concatenated, against the offline path's frames (exact:
  every frame handed on once, in order);
- samples: the stitched PCM's length against the offline decode's (frames x hop);
- PCM: SNR and max abs error of the stitched PCM against the offline decode
  (reference.codec.streaming.agreement), against a bound (conformance/cases/codec/streaming.yaml's).

One sub-case per geometry, over all its streams:
    equal               frames, samples and every stream within the bound;
    frames_differ       some stream's kept frames are not the offline frames (lost, repeated or moved);
    num_samples         some stream's stitched length is not the offline decode's;
    lossy_stitch        within frames and length, some stream misses the bound, and the geometry's
                        left context or holdback is short of the decoder's reach (a cost of the geometry);
    lossy_within_reach  the same, with context and holdback covering the reach (a stitching defect).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from reference.codec.streaming import Agreement, agreement

CHECK = "stream_offline"
TOLERANCE = ("exact frames and length; PCM against the offline decode within streaming.yaml's bound "
             "(SNR >= 100 dB, max abs err <= 1e-5)")


@dataclass(frozen=True)
class Window:
    frames: np.ndarray  # [8, width] the codes the window decodes
    left: int  # frames trimmed off the front of its decode
    right: int  # frames trimmed off the end
    pcm: np.ndarray  # what the foreign decoder kept of it

    def kept(self) -> np.ndarray:
        width = self.frames.shape[1]
        if self.left < 0 or self.right < 0 or self.left + self.right > width:
            raise ValueError(f"window of {width} frames cannot keep [{self.left}, {width} - {self.right})")
        return self.frames[:, self.left:width - self.right]


@dataclass(frozen=True)
class Bound:
    min_snr_db: float
    max_abs_err: float

    def met(self, figures: Agreement) -> bool:
        return figures.snr_db >= self.min_snr_db and figures.max_abs_err <= self.max_abs_err


@dataclass(frozen=True)
class StreamResult:
    windows: int
    offline_frames: int
    frames_equal: bool
    frames_detail: str  # where the kept frames first differ ("" when equal)
    samples: int
    offline_samples: int
    figures: Agreement | None  # None when the lengths differ


def first_difference(kept: np.ndarray, offline: np.ndarray) -> str:
    """Where two frame sequences [8, *] first part, in words ("" when equal)."""
    n = min(kept.shape[1], offline.shape[1])
    differ = np.flatnonzero((kept[:, :n] != offline[:, :n]).any(axis=0))
    if len(differ):
        return f"kept {kept.shape[1]} frames, offline {offline.shape[1]}; first differing frame {int(differ[0])}"
    if kept.shape[1] != offline.shape[1]:
        return f"kept {kept.shape[1]} frames, offline {offline.shape[1]}; equal over the first {n}"
    return ""


def compare(windows: list[Window], offline_frames: np.ndarray, offline_pcm: np.ndarray) -> StreamResult:
    """One stream: its windows against the offline path's frames [8, F] and decode [N]."""
    kept = [w.kept() for w in windows]
    kept_frames = np.concatenate(kept, axis=1) if kept else np.zeros((offline_frames.shape[0], 0), np.int64)
    where = first_difference(kept_frames, offline_frames)
    pcm = np.concatenate([np.asarray(w.pcm, np.float64).reshape(-1) for w in windows]) if windows else np.zeros(0)
    offline = np.asarray(offline_pcm, np.float64).reshape(-1)
    figures = agreement(torch.from_numpy(pcm), torch.from_numpy(offline)) if len(pcm) == len(offline) else None
    return StreamResult(len(windows), offline_frames.shape[1], not where, where, len(pcm), len(offline), figures)


def covers_reach(left_context: int, holdback: int, reach: tuple[int, int]) -> bool:
    """Whether a geometry's left context and holdback cover the decoder's (left, right) reach in frames."""
    return left_context >= reach[0] and holdback >= reach[1]


def judge_geometry(results: dict[str, StreamResult], within_reach: bool, bound: Bound) -> tuple[str | None, str]:
    """(difference id or None, detail) of one geometry over its streams."""
    if not results:
        raise ValueError("no stream ran under this geometry")
    frames = sum(r.offline_frames for r in results.values())
    windows = sum(r.windows for r in results.values())
    head = f"{len(results)} streams, {frames} frames, {windows} windows"
    moved = {sid: r for sid, r in results.items() if not r.frames_equal}
    if moved:
        sid, r = next(iter(moved.items()))
        return "frames_differ", f"{head}; {len(moved)} streams' kept frames differ; first {sid}: {r.frames_detail}"
    short = {sid: r for sid, r in results.items() if r.figures is None}
    if short:
        sid, r = next(iter(short.items()))
        return "num_samples", (f"{head}; {len(short)} streams' lengths differ; first {sid}: stitched {r.samples} "
                               f"samples, offline {r.offline_samples}")
    worst_snr = min(results, key=lambda s: results[s].figures.snr_db)
    worst_err = max(results, key=lambda s: results[s].figures.max_abs_err)
    detail = (f"{head}; every frame kept once in order, lengths equal; SNR min "
              f"{results[worst_snr].figures.snr_db:.2f} dB ({worst_snr}), max abs err "
              f"{results[worst_err].figures.max_abs_err:.3g} ({worst_err})")
    missed = [sid for sid, r in results.items() if not bound.met(r.figures)]
    if not missed:
        return None, detail + f"; all within SNR >= {bound.min_snr_db:g} dB, max abs err <= {bound.max_abs_err:g}"
    detail += f"; {len(missed)}/{len(results)} streams miss the bound"
    return ("lossy_within_reach" if within_reach else "lossy_stitch"), detail
