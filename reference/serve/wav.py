"""The bytes of the audio responses: 16-bit little-endian mono PCM at 24 kHz (OpenAI's `pcm`),
and WAV = a 44-byte RIFF header + that PCM.

A whole response's header carries the exact sizes. A streamed WAV cannot know its length when the
header goes out: its RIFF and data sizes are 0xFFFFFFFF, the conventional "unknown length"
(what ffmpeg and OpenAI's own streamed WAVs write); readers take the data to the end of the file.
`parse_header` reads either kind back, for the checks.
"""

from __future__ import annotations

import struct

import numpy as np
import torch

SAMPLE_RATE = 24000
UNKNOWN_LENGTH = 0xFFFFFFFF
HEADER_BYTES = 44


def pcm16(samples: torch.Tensor | np.ndarray) -> bytes:
    """Float samples in [-1, 1] -> 16-bit PCM bytes (clipped, rounded as reference.codec.wav_io.write_wav)."""
    wav = np.asarray(torch.as_tensor(samples, dtype=torch.float32).reshape(-1).cpu().numpy())
    return np.round(np.clip(wav, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()


def wav_header(data_bytes: int | None, sample_rate: int = SAMPLE_RATE) -> bytes:
    """The RIFF/WAVE header of mono 16-bit PCM; `data_bytes` None: unknown length (streaming)."""
    data = UNKNOWN_LENGTH if data_bytes is None else data_bytes
    riff = UNKNOWN_LENGTH if data_bytes is None else 36 + data_bytes
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16,
        b"data", data,
    )


def wav_file(pcm: bytes, sample_rate: int = SAMPLE_RATE) -> bytes:
    return wav_header(len(pcm), sample_rate) + pcm


def parse_header(data: bytes) -> dict:
    """The fields of a 44-byte PCM WAV header (ValueError if it is not one)."""
    if len(data) < HEADER_BYTES:
        raise ValueError(f"a WAV header is {HEADER_BYTES} bytes, got {len(data)}")
    riff, riff_size, wave, fmt, fmt_size, kind, channels, rate, byte_rate, align, bits, tag, data_size = struct.unpack(
        "<4sI4s4sIHHIIHH4sI", data[:HEADER_BYTES]
    )
    if (riff, wave, fmt, tag) != (b"RIFF", b"WAVE", b"fmt ", b"data") or fmt_size != 16 or kind != 1:
        raise ValueError("not a canonical 44-byte PCM WAV header")
    return {"riff_size": riff_size, "channels": channels, "sample_rate": rate, "byte_rate": byte_rate,
            "block_align": align, "bits": bits, "data_size": data_size}
