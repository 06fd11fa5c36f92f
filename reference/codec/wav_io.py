"""Reference audio in: reading a WAV file and resampling, without torchaudio or scipy.

    read_wav(path)                    -> (float32 mono numpy array in [-1, 1], sample_rate)
    resample(wav, orig_sr, new_sr)    -> float tensor at new_sr, ceil(len * new_sr / orig_sr) samples
    to_mono_float(wav)                -> 1-D float32 tensor (what the encoder accepts)

`resample` is a windowed-sinc polyphase resampler with torchaudio's defaults (Hann window,
6 zero crossings, roll-off 0.99): the kernel is evaluated in the signal's dtype and applied by
one strided conv1d over the zero-padded signal, so it is deterministic on CPU and follows the
arithmetic of `torchaudio.functional.resample`, which transformers' Higgs audio tokenizer calls
for its 24 kHz -> 16 kHz semantic branch. torchaudio cannot be installed beside this torch and
scipy is not installed, hence our own implementation.

read_wav uses the stdlib `wave` module (soundfile is not installed here): PCM 8/16/24/32-bit
integer WAVs, any channel count (averaged to mono), any rate (resampled to 24 kHz by the caller
or with `target_sr`). Float WAVs (format 3) and compressed formats are refused with a clear error.
"""

from __future__ import annotations

import math
import wave
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

LOWPASS_WIDTH = 6  # zero crossings of the sinc on each side
ROLLOFF = 0.99  # cut-off as a fraction of the lower Nyquist frequency


class AudioInputError(ValueError):
    """The reference audio is unreadable, empty, or in an unsupported format."""


def _sinc_kernel(orig: int, new: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, int]:
    """Polyphase kernel [new, 1, 2 * width + orig] for rates already reduced by their gcd."""
    cutoff = min(orig, new) * ROLLOFF
    width = math.ceil(LOWPASS_WIDTH * orig / cutoff)
    taps = torch.arange(-width, width + orig, dtype=dtype, device=device)[None, None] / orig
    phases = torch.arange(0, -new, -1, dtype=dtype, device=device)[:, None, None] / new
    t = (phases + taps) * cutoff
    t = t.clamp(-LOWPASS_WIDTH, LOWPASS_WIDTH)
    hann = torch.cos(t * math.pi / LOWPASS_WIDTH / 2) ** 2
    t = t * math.pi
    sinc = torch.where(t == 0, torch.ones((), dtype=dtype, device=device), t.sin() / t)
    return sinc * (hann * (cutoff / orig)), width


def resample(wav: torch.Tensor, orig_sr: int, new_sr: int) -> torch.Tensor:
    """Band-limited resampling along the last axis; output length ceil(len * new_sr / orig_sr)."""
    if int(orig_sr) != orig_sr or int(new_sr) != new_sr or orig_sr <= 0 or new_sr <= 0:
        raise ValueError(f"sample rates must be positive integers, got {orig_sr} -> {new_sr}")
    if not wav.is_floating_point():
        raise TypeError(f"resample needs a floating-point signal, got {wav.dtype}")
    if orig_sr == new_sr:
        return wav
    g = math.gcd(int(orig_sr), int(new_sr))
    orig, new = int(orig_sr) // g, int(new_sr) // g
    kernel, width = _sinc_kernel(orig, new, wav.dtype, wav.device)
    shape = wav.shape
    flat = wav.reshape(-1, shape[-1])
    length = flat.shape[-1]
    padded = F.pad(flat, (width, width + orig))
    out = F.conv1d(padded[:, None], kernel, stride=orig)  # [B, new, frames]
    out = out.transpose(1, 2).reshape(flat.shape[0], -1)
    target = math.ceil(new * length / orig)
    return out[..., :target].reshape(*shape[:-1], -1)


def to_mono_float(wav: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A 1-D (or [1, N]) float signal -> 1-D float32 CPU tensor; raises AudioInputError otherwise."""
    if isinstance(wav, np.ndarray):
        if wav.dtype.kind not in "f":
            raise AudioInputError(f"reference audio must be float samples in [-1, 1], got dtype {wav.dtype}")
        wav = torch.from_numpy(np.ascontiguousarray(wav))
    if not isinstance(wav, torch.Tensor):
        raise AudioInputError(f"reference audio must be a numpy array or torch tensor, got {type(wav).__name__}")
    if not wav.is_floating_point():
        raise AudioInputError(f"reference audio must be float samples in [-1, 1], got dtype {wav.dtype}")
    if wav.ndim == 2 and wav.shape[0] == 1:
        wav = wav[0]
    if wav.ndim != 1:
        raise AudioInputError(
            f"reference audio must be mono, shape [N] or [1, N], got {tuple(wav.shape)}; average the channels first"
        )
    if wav.numel() == 0:
        raise AudioInputError("reference audio is empty (0 samples)")
    wav = wav.detach().to(device="cpu", dtype=torch.float32)
    if not torch.isfinite(wav).all():
        raise AudioInputError("reference audio holds NaN or infinite samples")
    return wav


_PCM_SCALE = {1: 128.0, 2: 32768.0, 3: 8388608.0, 4: 2147483648.0}


def _pcm_to_float(raw: bytes, width: int, channels: int) -> np.ndarray:
    """Little-endian PCM bytes -> float32 [frames, channels] in [-1, 1)."""
    if width == 1:  # 8-bit WAV is unsigned
        ints = np.frombuffer(raw, dtype=np.uint8).astype(np.int32) - 128
    elif width == 3:  # 24-bit: sign-extend three bytes into int32
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        ints = np.where(ints >= 1 << 23, ints - (1 << 24), ints)
    else:
        ints = np.frombuffer(raw, dtype={2: "<i2", 4: "<i4"}[width]).astype(np.int64)
    return (ints / _PCM_SCALE[width]).astype(np.float32).reshape(-1, channels)


def read_wav(path: str | Path, target_sr: int | None = None) -> tuple[np.ndarray, int]:
    """A PCM WAV file -> (float32 mono samples, sample rate); resampled when `target_sr` is given.

    Channels are averaged. Raises FileNotFoundError for a missing file and AudioInputError for
    anything `wave` cannot read (not RIFF/WAVE, float or compressed WAV, truncated header) or a
    file without samples.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"reference audio file not found: {path}")
    try:
        with wave.open(str(path), "rb") as w:
            channels, width, rate, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(n)
    except wave.Error as exc:
        raise AudioInputError(
            f"cannot read {path} as a PCM WAV file ({exc}); only uncompressed integer PCM WAV "
            "(8/16/24/32-bit) is supported: convert it, e.g. `ffmpeg -i IN -c:a pcm_s16le OUT.wav`"
        ) from exc
    except (EOFError, OSError) as exc:
        raise AudioInputError(f"cannot read {path} as a WAV file: {exc or 'truncated file'}") from exc
    if width not in _PCM_SCALE:
        raise AudioInputError(f"{path}: unsupported sample width {width} bytes (expected 1, 2, 3 or 4)")
    if channels < 1 or rate < 1:
        raise AudioInputError(f"{path}: invalid WAV header ({channels} channels, {rate} Hz)")
    usable = len(raw) - len(raw) % (width * channels)
    if usable == 0:
        raise AudioInputError(f"{path}: the WAV file holds no samples")
    mono = _pcm_to_float(raw[:usable], width, channels).mean(axis=1, dtype=np.float32)
    if target_sr is not None and target_sr != rate:
        mono = resample(torch.from_numpy(mono), rate, target_sr).numpy()
        rate = int(target_sr)
    return np.ascontiguousarray(mono, dtype=np.float32), int(rate)


def write_wav(path: str | Path, wav: np.ndarray | torch.Tensor, sample_rate: int) -> Path:
    """Float mono samples -> 16-bit PCM WAV (clipped to [-1, 1]); for fixtures and examples."""
    samples = np.asarray(torch.as_tensor(wav, dtype=torch.float32).reshape(-1).numpy())
    pcm = np.round(np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())
    return Path(path)
