"""Dummy checkpoints written once per (size, seed, flavour) into a cache folder and reused."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from higgs_dummy.checkpoint import write_checkpoint

ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV = "HIGGS_FIXTURE_CACHE"


def writer_digest() -> str:
    """A short hash of the writer's own source: a cached folder written by an older writer is
    never reused."""
    h = hashlib.sha256()
    for f in sorted(Path(__file__).resolve().parent.glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:10]


def cached_checkpoint(size: str = "tiny", seed: int = 0, flavour: str = "greedy") -> Path:
    """The folder of the dummy checkpoint for (size, seed, flavour), written on first use.

    The folder is `$HIGGS_FIXTURE_CACHE/<size>-seed<seed>[-<flavour>]-<writer digest>` (default:
    .cache/checkpoints in the repository). A `.complete` marker guards against a half-written folder.
    """
    root = Path(os.environ.get(CACHE_ENV, ROOT / ".cache" / "checkpoints"))
    name = f"{size}-seed{seed}" + ("" if flavour == "greedy" else f"-{flavour}") + f"-{writer_digest()}"
    path = root / name
    if not (path / ".complete").exists():
        write_checkpoint(path, size, seed, flavour)
        (path / ".complete").touch()
    return path
