"""Reproducible speech for the calibration controls: espeak-ng voices, and the degradations.

A clip is espeak-ng's WAV (22050 Hz, 16 bit) of one text in one voice at a fixed speed and pitch,
resampled to 16 kHz by a fixed polyphase filter; nothing is random, so a clip is identical on
every machine with the same espeak-ng build. Clips are cached under .cache/quality/clips/ by a
hash of the command and the espeak-ng version.

espeak-ng is the one on PATH, or, where HIGGS_ESPEAK_NG_ROOT is set, the one unpacked from Debian
packages into that folder (`dpkg -x`, or `bundle install` of the quality bundle: the GPU host has
no espeak-ng and no network): ROOT/usr/bin/espeak-ng runs with ROOT's libraries and voices. A
variable that names no espeak-ng is an error, not a fallback to PATH.

The degradations are the controls of cases/quality/controls.yaml: each turns real speech into
audio a working scorer must score far worse.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly

from conformance.quality import SAMPLE_RATE

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "quality" / "clips"
ESPEAK_ROOT_ENV = "HIGGS_ESPEAK_NG_ROOT"
ESPEAK_MISSING = (f"needs espeak-ng for the reference clips: `apt-get install -y espeak-ng` (.ci/run installs it), or "
                  f"{ESPEAK_ROOT_ENV}=<folder with espeak-ng's Debian packages unpacked> (the quality bundle's "
                  "`bundle install` prints it; docs/gate.md)")


class EspeakError(RuntimeError):
    """HIGGS_ESPEAK_NG_ROOT names no usable espeak-ng."""


def espeak_available() -> bool:
    """espeak-ng on PATH, or HIGGS_ESPEAK_NG_ROOT set (then a root without espeak-ng fails the
    checks that need it, naming the variable, rather than skipping them)."""
    return bool(os.environ.get(ESPEAK_ROOT_ENV)) or shutil.which("espeak-ng") is not None


def espeak_runtime() -> tuple[str, dict[str, str] | None]:
    """(the espeak-ng program, the environment it runs with: None for the caller's own)."""
    value = os.environ.get(ESPEAK_ROOT_ENV)
    return ("espeak-ng", None) if not value else _carried(value)


@lru_cache(maxsize=4)
def _carried(value: str) -> tuple[str, dict[str, str]]:
    root = Path(value)
    program = root / "usr" / "bin" / "espeak-ng"
    if not program.is_file():
        raise EspeakError(f"{ESPEAK_ROOT_ENV}={value} has no usr/bin/espeak-ng: unpack espeak-ng's Debian packages "
                          "there (`dpkg -x PKG.deb ROOT` for each, or `bundle install` of the quality bundle)")
    data = sorted(root.glob("usr/lib/*/espeak-ng-data")) + sorted(root.glob("usr/share/espeak-ng-data"))
    if not data:
        raise EspeakError(f"{ESPEAK_ROOT_ENV}={value} has no espeak-ng-data folder: unpack espeak-ng-data's package there too")
    # Every folder of shared libraries in the root (pulseaudio's private one too), before the caller's.
    libs = sorted({str(lib.parent) for pattern in ("lib/*/*.so*", "usr/lib/*/*.so*", "usr/lib/*/*/*.so*")
                   for lib in root.glob(pattern)})
    env = {**os.environ, "ESPEAK_DATA_PATH": str(data[0].parent),
           "LD_LIBRARY_PATH": os.pathsep.join(filter(None, [*libs, os.environ.get("LD_LIBRARY_PATH")]))}
    return str(program), env


def espeak_version() -> str:
    program, env = espeak_runtime()
    return _version(program, tuple(sorted(env.items())) if env else None)


@lru_cache(maxsize=4)
def _version(program: str, env: tuple | None) -> str:
    run = subprocess.run([program, "--version"], capture_output=True, text=True, env=dict(env) if env else None)
    if run.returncode != 0:
        raise EspeakError(f"{program} --version failed (exit {run.returncode}): {run.stderr.strip()[-500:]}")
    return run.stdout.strip()


def espeak_command(voice: str, text: str, speed: int, pitch: int) -> list[str]:
    return ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", text]


def synthesise(voice: str, text: str, speed: int, pitch: int, cache: Path = CACHE) -> np.ndarray:
    """`text` spoken by espeak-ng `voice`, 16 kHz mono float32 in [-1, 1]; cached."""
    command = espeak_command(voice, text, speed, pitch)
    key = hashlib.sha256(repr((command, espeak_version())).encode()).hexdigest()[:16]
    path = cache / f"{key}.npy"
    if path.exists():
        return np.load(path)
    with tempfile.TemporaryDirectory() as tmp:  # a file, not stdout: its WAV header has the true length
        wav = Path(tmp) / "clip.wav"
        program, env = espeak_runtime()
        subprocess.run([program, *command[1:-2], "-w", str(wav), command[-1]], capture_output=True, check=True, env=env)
        rate, pcm = wavfile.read(wav)
    if rate != 22050 or pcm.dtype != np.int16:
        raise ValueError(f"espeak-ng wrote {rate} Hz {pcm.dtype}; the clips assume 22050 Hz int16")
    audio = resample_poly(pcm.astype(np.float64) / 32768.0, 320, 441).astype(np.float32)  # 22050 -> 16000
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, audio)
    return audio


def fingerprint(audio: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(audio, dtype=np.float32).tobytes()).hexdigest()


# -- degradations (the controls) ------------------------------------------------------------------

def add_noise(audio: np.ndarray, snr_db: float, seed: int) -> np.ndarray:
    """White Gaussian noise at `snr_db` relative to the clip's mean power (seeded)."""
    power = float(np.mean(audio.astype(np.float64) ** 2))
    noise = np.random.default_rng(seed).standard_normal(len(audio)) * np.sqrt(power / 10 ** (snr_db / 10))
    return (audio + noise).astype(np.float32)


def reverse(audio: np.ndarray) -> np.ndarray:
    return audio[::-1].copy()


def truncate(audio: np.ndarray, keep: float) -> np.ndarray:
    return audio[: int(len(audio) * keep)].copy()


def gaps(audio: np.ndarray, gap_s: float, every_s: float) -> np.ndarray:
    """Silence `gap_s` of audio at the start of every `every_s` window after the first: what a
    stream that drops a chunk now and then sounds like; the length is kept."""
    out = audio.copy()
    gap, every = int(gap_s * SAMPLE_RATE), int(every_s * SAMPLE_RATE)
    for start in range(every, len(out), every):
        out[start : start + gap] = 0.0
    return out


def degrade(audio: np.ndarray, transform: dict) -> np.ndarray:
    """Applies one control's transform (cases/quality/controls.yaml, `transform`)."""
    kind = transform["kind"]
    if kind == "none":
        return audio
    if kind == "noise":
        return add_noise(audio, float(transform["snr_db"]), int(transform["seed"]))
    if kind == "reverse":
        return reverse(audio)
    if kind == "truncate":
        return truncate(audio, float(transform["keep"]))
    if kind == "gaps":
        return gaps(audio, float(transform["gap_s"]), float(transform["every_s"]))
    raise ValueError(f"unknown transform kind {kind!r}")
