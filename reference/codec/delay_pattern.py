"""The MusicGen-style delay pattern between codec frames and the talker's rows.

The talker emits one row of 8 codes per step. Codebook q lags q steps behind codebook 0:

    apply_delay(codes [8, T]) -> rows [T + 7, 8] with
        rows[t, q] = BOC (1024)          for t < q           (lead-in)
        rows[t, q] = codes[q, t - q]     for q <= t < q + T
        rows[t, q] = EOC (1025)          for t >= q + T      (ramp-down)

    revert_delay(rows [L, 8]) -> codes [8, L - 7] with codes[q, t] = rows[q + t, q]
    (codebook q takes rows q .. q + L - 8).

A reverted frame may still hold BOC/EOC (a stream that stopped early, or extra rows); `real_frames`
drops such frames. Filter after reverting, never before: dropping rows that hold BOC/EOC would
remove the lead-in and ramp-down rows and misalign every codebook but the first.

Functions take torch tensors or numpy arrays and return the same kind.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

from reference.codebooks import BOC, CODEBOOK_SIZE, EOC, NUM_CODEBOOKS


Array = TypeVar("Array", torch.Tensor, np.ndarray)


def _check_2d(x: Array, name: str, width_axis: int, layout: str) -> None:
    if not isinstance(x, (torch.Tensor, np.ndarray)):
        raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    if x.ndim != 2 or x.shape[width_axis] != NUM_CODEBOOKS:
        raise ValueError(f"{name} must have shape {layout} with {NUM_CODEBOOKS} codebooks, got {tuple(x.shape)}")
    if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
        raise ValueError(f"{name} must hold integer codes, got dtype {x.dtype}")
    if isinstance(x, np.ndarray) and not np.issubdtype(x.dtype, np.integer):
        raise ValueError(f"{name} must hold integer codes, got dtype {x.dtype}")


def apply_delay(codes: Array) -> Array:
    """codes [8, T] -> rows [T + 7, 8]: codebook q shifted down by q, BOC before, EOC after."""
    _check_2d(codes, "codes", 0, "[8, T]")
    n, t = codes.shape
    if isinstance(codes, torch.Tensor):
        rows = torch.full((t + n - 1, n), EOC, dtype=codes.dtype, device=codes.device)  # [T + 7, 8]
    else:
        rows = np.full((t + n - 1, n), EOC, dtype=codes.dtype)  # [T + 7, 8]
    for q in range(n):
        rows[:q, q] = BOC
        rows[q : q + t, q] = codes[q]
    return rows


def revert_delay(rows: Array) -> Array:
    """rows [L, 8] -> codes [8, L - 7]: codebook q takes rows q .. q + L - 8."""
    _check_2d(rows, "rows", 1, "[L, 8]")
    n = NUM_CODEBOOKS
    length = rows.shape[0]
    if length < n - 1:
        raise ValueError(f"rows must have at least {n - 1} rows (the delay of the last codebook), got {length}")
    t = length - (n - 1)
    parts = [rows[q : q + t, q] for q in range(n)]  # 8 x [T]
    if isinstance(rows, torch.Tensor):
        return torch.stack(parts, dim=0)  # [8, T]
    return np.stack(parts, axis=0)  # [8, T]


def real_frame_mask(codes: Array) -> Array:
    """codes [8, T] -> bool [T]: True where every codebook holds a real code (0 .. 1023)."""
    _check_2d(codes, "codes", 0, "[8, T]")
    real = (codes >= 0) & (codes < CODEBOOK_SIZE)  # [8, T]
    return real.all(0) if isinstance(codes, torch.Tensor) else real.all(axis=0)


def real_frames(codes: Array) -> Array:
    """codes [8, T] -> codes [8, T']: drops frames with any code outside 0 .. 1023 (apply after revert)."""
    return codes[:, real_frame_mask(codes)]


def rows_to_frames(rows: Array) -> Array:
    """The offline path: the talker's delayed rows [L, 8] -> real codec frames [8, T']."""
    return real_frames(revert_delay(rows))
