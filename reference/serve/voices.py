"""Reference voices: named voices from a folder (`NAME.wav`, and its transcript `NAME.txt` if
present) and reference WAV files sent in a request. Both are read by reference.codec.wav_io's
reader (integer PCM WAV, any rate and channel count) and limited in length."""

from __future__ import annotations

import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reference.codec.wav_io import AudioInputError, read_wav
from reference.serve.protocol import DEFAULT_VOICE, RequestError


@dataclass(frozen=True)
class Voice:
    name: str
    samples: np.ndarray | None  # None: the zero-shot default voice
    sample_rate: int = 24000
    ref_text: str | None = None


def load_voices(folder: str | Path | None) -> dict[str, Voice]:
    """The default (zero-shot) voice plus every NAME.wav of `folder`."""
    voices = {DEFAULT_VOICE: Voice(DEFAULT_VOICE, None)}
    if folder is None:
        return voices
    for path in sorted(Path(folder).glob("*.wav")):
        if path.stem == DEFAULT_VOICE:
            raise ValueError(f"{path}: the name {DEFAULT_VOICE!r} is the zero-shot voice; rename the file")
        samples, rate = read_wav(path)
        text = path.with_suffix(".txt")
        voices[path.stem] = Voice(path.stem, samples, rate, text.read_text().strip() if text.is_file() else None)
    return voices


def decode_ref_audio(data: bytes, max_seconds: float) -> tuple[np.ndarray, int]:
    """A WAV file's bytes -> (mono float samples, rate); RequestError naming 'ref_audio' otherwise."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        f.write(data)
        f.flush()
        try:
            samples, rate = read_wav(f.name)
        except (AudioInputError, EOFError, struct.error, ValueError) as exc:
            raise RequestError(400, "ref_audio", f"'ref_audio' is not a readable WAV file: "
                                                 f"{str(exc).replace(f.name, 'ref_audio')}") from None
    seconds = len(samples) / rate
    if seconds > max_seconds:
        raise RequestError(400, "ref_audio", f"'ref_audio' is {seconds:.1f} s long, over the limit of "
                                             f"{max_seconds:g} s")
    return samples, rate
