"""An independent numpy statement of the delay pattern, for building talker rows in cases.

Step s of the talker writes row s; codebook q at step s carries frame s - q: BOC (1024) before
the frame range, EOC (1025) after it. Nothing here is imported from `reference`.
"""

from __future__ import annotations

import numpy as np

# Own copies of the format's constants, on purpose: an independent oracle shares no code with reference/.
BOC, EOC = 1024, 1025


def delayed_rows(frames: np.ndarray) -> np.ndarray:
    """frames [N, T] -> the rows [T + N - 1, N] a talker emits for them."""
    n, t = frames.shape
    rows = np.empty((t + n - 1, n), dtype=np.int64)
    for step in range(t + n - 1):
        for q in range(n):
            frame = step - q
            rows[step, q] = BOC if frame < 0 else (EOC if frame >= t else frames[q, frame])
    return rows


def undelayed_frames(rows: np.ndarray) -> np.ndarray:
    """rows [L, N] -> frames [N, L - N + 1], every frame kept (BOC/EOC included)."""
    length, n = rows.shape
    return np.array([[rows[t + q, q] for t in range(length - n + 1)] for q in range(n)], dtype=np.int64)
