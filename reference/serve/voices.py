"""Reference voices: named voices in a folder (`NAME.wav`, and its transcript `NAME.txt` if
present), uploaded through `POST /v1/audio/voices` into that folder, and reference WAV files sent
in a request. All are read by reference.codec.wav_io's reader (integer PCM WAV, any rate and channel
count) and limited in length and size.

A named voice's codec codes are encoded once and kept, in memory and on disk under the folder's
`.codes/` as `<digest>.npy`, where the digest is the samples' (so a voice replaced under the same
name never meets the old codes, and a restart encodes nothing it encoded before). Uploads and
deletes change the folder atomically (a temporary file in the folder, then a rename) and swap the
name's `Voice` in the store: a request holds the `Voice` it started with until it ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import os
import re
import struct
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reference.codec.wav_io import AudioInputError, read_wav
from reference.serve.protocol import DEFAULT_VOICE, RequestError, known_voices

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")  # a file name anywhere and a URL path segment as is
CODES = ".codes"
logger = logging.getLogger("higgs_ref.serve")


@dataclass(frozen=True)
class Voice:
    name: str
    samples: np.ndarray | None  # None: the zero-shot default voice
    sample_rate: int = 24000
    ref_text: str | None = None
    digest: str | None = None  # of the samples and rate: the key of its codes
    created_at: int = 0
    file_size: int = 0


def digest_of(samples: np.ndarray, rate: int) -> str:
    return hashlib.sha256(f"{rate}:".encode() + np.ascontiguousarray(samples, dtype="<f4").tobytes()).hexdigest()[:32]


def _voice(path: Path) -> Voice:
    samples, rate = read_wav(path)
    text = path.with_suffix(".txt")
    return Voice(path.stem, samples, rate, text.read_text().strip() if text.is_file() else None,
                 digest_of(samples, rate), int(path.stat().st_mtime), path.stat().st_size)


def load_voices(folder: str | Path | None) -> dict[str, Voice]:
    """The default (zero-shot) voice plus every NAME.wav of `folder`. A file that cannot be read,
    or whose real path leaves the folder (a symbolic link out of it), is skipped with a warning
    naming it: one bad file does not stop the server."""
    voices = {DEFAULT_VOICE: Voice(DEFAULT_VOICE, None)}
    if folder is None:
        return voices
    root = Path(folder).resolve()
    for path in sorted(Path(folder).glob("*.wav")):
        if path.stem == DEFAULT_VOICE:
            raise ValueError(f"{path}: the name {DEFAULT_VOICE!r} is the zero-shot voice; rename the file")
        outside = [p for p in (path, path.with_suffix(".txt")) if not p.resolve().is_relative_to(root)]
        if outside:  # a link out of the folder: never read, never served
            logger.warning("voice %s skipped: %s links to %s, outside the voices folder", path, outside[0].name,
                           outside[0].resolve())
            continue
        try:
            voices[path.stem] = _voice(path)
        except (OSError, AudioInputError, EOFError, struct.error, ValueError, UnicodeDecodeError) as exc:
            logger.warning("voice %s skipped: not a readable WAV file (%s)", path, f"{type(exc).__name__}: {exc}")
    return voices


def decode_ref_audio(data: bytes, max_seconds: float, param: str = "ref_audio") -> tuple[np.ndarray, int]:
    """A WAV file's bytes -> (mono float samples, rate); RequestError naming `param` otherwise."""
    if not data:
        raise RequestError(400, param, f"'{param}' is empty: send a WAV file")
    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        f.write(data)
        f.flush()
        try:
            samples, rate = read_wav(f.name)
        except (AudioInputError, EOFError, struct.error, ValueError) as exc:
            reason = str(exc).replace(f.name, param) or type(exc).__name__
            raise RequestError(400, param, f"'{param}' is not a readable WAV file: {reason}") from None
    seconds = len(samples) / rate
    if seconds > max_seconds:
        raise RequestError(400, param, f"'{param}' is {seconds:.1f} s long, over the limit of {max_seconds:g} s")
    if len(samples) == 0:
        raise RequestError(400, param, f"'{param}' holds no samples")
    return samples, rate


def _write_atomically(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all: a temporary file beside it, flushed, then renamed."""
    fd, scratch = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(scratch, path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise


@dataclass
class VoiceStore:
    """The server's named voices: the folder's, and what is uploaded into it."""

    voices: dict[str, Voice]
    folder: Path | None = None
    max_bytes: int = 4 << 20
    max_seconds: float = 30.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _writable(self) -> Path:
        if self.folder is None:
            raise RequestError(400, "name", "this server keeps no voice folder: start it with --voices DIR to "
                                            "upload voices")
        return self.folder

    @staticmethod
    def check_name(name) -> str:
        if name is None or name == "":
            raise RequestError(400, "name", "'name' is required: the voice's name, 1 to 64 ASCII letters, digits, "
                                            "'-' or '_'")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            shown = name if isinstance(name, str) and len(name) <= 80 else f"{str(name)[:80]}..."
            raise RequestError(400, "name", f"voice name {shown!r} must be 1 to 64 ASCII letters, digits, '-' or "
                                            "'_', starting with a letter or digit (it names a file)")
        if name == DEFAULT_VOICE:
            raise RequestError(400, "name", f"{DEFAULT_VOICE!r} is the zero-shot voice; choose another name")
        return name

    async def upload(self, name, data: bytes, ref_text: str | None) -> Voice:
        """Stores the WAV (replacing a voice of that name, as vllm-omni's default policy does)."""
        folder = self._writable()
        name = self.check_name(name)
        if len(data) > self.max_bytes:
            raise RequestError(413, "audio_sample", f"'audio_sample' is {len(data)} bytes, over the limit of "
                                                    f"{self.max_bytes} bytes")
        samples, rate = decode_ref_audio(data, self.max_seconds, param="audio_sample")
        ref_text = (ref_text or "").strip() or None
        async with self._lock:
            text = folder / f"{name}.txt"
            if ref_text is None:
                text.unlink(missing_ok=True)
            else:
                await asyncio.to_thread(_write_atomically, text, ref_text.encode())
            await asyncio.to_thread(_write_atomically, folder / f"{name}.wav", data)
            voice = Voice(name, samples, rate, ref_text, digest_of(samples, rate), int(time.time()), len(data))
            replaced = self.voices.get(name)
            self.voices[name] = voice  # a request that began with the old one keeps it
            if replaced is not None:
                self._forget_codes(replaced)
        return voice

    async def delete(self, name: str) -> None:
        folder = self._writable()
        if name == DEFAULT_VOICE or not NAME.fullmatch(name):
            raise RequestError(400, "name", f"{name[:80]!r} is not an uploaded voice's name")
        async with self._lock:
            if name not in self.voices:
                raise RequestError(404, "name", f"no voice {name!r}; {known_voices(self.voices)}")
            voice = self.voices.pop(name)
            (folder / f"{name}.wav").unlink(missing_ok=True)
            (folder / f"{name}.txt").unlink(missing_ok=True)
            self._forget_codes(voice)

    def _forget_codes(self, voice: Voice) -> None:
        """The stored codes of a voice gone from the store, unless another voice has the same samples."""
        if voice.digest not in {v.digest for v in self.voices.values()}:
            self.codes_path(voice.digest).unlink(missing_ok=True)

    def codes_path(self, digest: str) -> Path:
        return self.folder / CODES / f"{digest}.npy"

    def stored_codes(self, voice: Voice) -> np.ndarray | None:
        path = self.codes_path(voice.digest) if self.folder is not None else None
        return np.load(path) if path is not None and path.is_file() else None

    def keep_codes(self, voice: Voice, codes: np.ndarray) -> None:
        if self.folder is not None:
            self.codes_path(voice.digest).parent.mkdir(exist_ok=True)
            buffer = io.BytesIO()
            np.save(buffer, codes)
            _write_atomically(self.codes_path(voice.digest), buffer.getvalue())

    def listing(self) -> dict:
        """vllm-omni's shape: every name, and the uploaded (folder) voices' details."""
        uploaded = [{"name": v.name, "created_at": v.created_at, "file_size": v.file_size, "mime_type": "audio/wav",
                     **({"ref_text": v.ref_text} if v.ref_text else {})}
                    for v in sorted(self.voices.values(), key=lambda v: v.name) if v.samples is not None]
        return {"voices": sorted(self.voices), "uploaded_voices": uploaded}
