"""Dummy checkpoints written once per (size, seed) into a cache folder and reused."""

from __future__ import annotations

import os
from pathlib import Path

from higgs_dummy.checkpoint import write_checkpoint

ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV = "HIGGS_FIXTURE_CACHE"


def cached_checkpoint(size: str = "tiny", seed: int = 0, flavour: str = "greedy") -> Path:
    """The folder of the dummy checkpoint for (size, seed, flavour), written on first use.

    The folder is `$HIGGS_FIXTURE_CACHE/<size>-seed<seed>[-<flavour>]` (default: .cache/checkpoints
    in the repository). A `.complete` marker guards against a half-written folder.
    """
    root = Path(os.environ.get(CACHE_ENV, ROOT / ".cache" / "checkpoints"))
    path = root / (f"{size}-seed{seed}" + ("" if flavour == "greedy" else f"-{flavour}"))
    if not (path / ".complete").exists():
        write_checkpoint(path, size, seed, flavour)
        (path / ".complete").touch()
    return path
