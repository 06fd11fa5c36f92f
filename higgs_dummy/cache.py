"""Dummy checkpoints written once per (size, seed, flavour) into a cache folder and reused."""

from __future__ import annotations

import hashlib
import os
import tempfile
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
    .cache/checkpoints in the repository). It is written under a temporary name and renamed into
    place whole, so processes that race for it (pytest-xdist workers) never see a half-written
    folder; the one that loses the race drops its copy.
    """
    root = Path(os.environ.get(CACHE_ENV, ROOT / ".cache" / "checkpoints"))
    name = f"{size}-seed{seed}" + ("" if flavour == "greedy" else f"-{flavour}") + f"-{writer_digest()}"
    path = root / name
    if not path.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix=f".{name}.") as scratch:
            written = write_checkpoint(Path(scratch) / name, size, seed, flavour)
            try:
                written.rename(path)
            except OSError:  # another process renamed its copy into place first
                if not path.is_dir():
                    raise
    return path
