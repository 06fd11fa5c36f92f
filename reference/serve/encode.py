"""The compressed answers (`response_format` mp3, opus, aac, flac): 16-bit mono 24 kHz PCM in,
FFmpeg's encoder and muxer through PyAV out, chunk by chunk.

`StreamEncoder.add(pcm)` returns the bytes the muxer has written so far (an encoder holds back what
its frame size and look-ahead need: LAME's first frames come with the second chunk);
`finish()` flushes the encoder and writes the trailer, so the last samples are never lost. PyAV
cuts the samples into the codec's frame size and converts the sample format (FFmpeg's
swresample); nothing here touches a sample. The output is a write-only stream (no seek), so every
muxer writes what a streamed answer can carry: no Xing/LAME header for mp3 (a decoder then keeps
the encoder's priming, 1105 samples, as silence at the start), ADTS frames for aac (1024 samples
of priming, which ADTS has no field to declare), Ogg pages with the pre-skip for opus (decoders
drop the priming), and FLAC without the final STREAMINFO rewrite (the total length stays unknown,
as in a streamed WAV). A whole answer (`encode_whole`) goes through the same encoder into a
seekable buffer, so its header is complete; whole aac goes into MP4 (`audio/mp4`), whose edit
list declares the priming, so decoders drop it as mp3's do with the LAME header (FFmpeg's
decoder then keeps only the last frame's padding: at most 1023 samples after the audio, where
ADTS kept 1024 before it).

Content types as OpenAI and vllm-omni answer them (vllm-omni 0.30.0, entrypoints/openai/
serving_speech.py): audio/mpeg, audio/ogg, audio/aac, audio/flac; and audio/mp4 for whole aac.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import av
import numpy as np

SAMPLE_RATE = 24000


@dataclass(frozen=True)
class Format:
    container: str  # FFmpeg's muxer
    codec: str  # FFmpeg's encoder
    media_type: str
    bit_rate: int | None = None  # None: lossless
    muxer_options: tuple[tuple[str, str], ...] = ()  # FFmpeg's muxer options beyond bitexact
    whole: tuple[str, str] | None = None  # (muxer, media type) of a whole answer, where not the stream's


# Mono 24 kHz: mp3 is MPEG-2 layer III there (8-160 kbit/s; LAME's default would be 64).
FORMATS = {
    "mp3": Format("mp3", "libmp3lame", "audio/mpeg", 128_000),
    # One Opus packet (20 ms) per Ogg page: a page leaves as soon as its packet is encoded. With the
    # muxer's default, 1 s pages, a streamed answer carried its first audio about 2 s of audio late.
    "opus": Format("ogg", "libopus", "audio/ogg", 64_000, (("page_duration", "20000"),)),
    # ADTS cannot declare the encoder's priming; MP4's edit list can, but needs a seekable output.
    "aac": Format("adts", "aac", "audio/aac", 96_000, whole=("mp4", "audio/mp4")),
    "flac": Format("flac", "flac", "audio/flac"),
}


def media_type(response_format: str, whole: bool) -> str:
    spec = FORMATS[response_format]
    return spec.whole[1] if whole and spec.whole else spec.media_type


def _open(target, response_format: str, sample_rate: int, whole: bool = False):
    """(FFmpeg's muxer writing to `target`, its encoder's stream). bitexact: no random Ogg serial
    number nor MP4 creation time, so equal PCM always makes equal bytes."""
    spec = FORMATS[response_format]
    muxer = spec.whole[0] if whole and spec.whole else spec.container
    container = av.open(target, mode="w", format=muxer,
                        container_options={"fflags": "+bitexact", **dict(spec.muxer_options)})
    stream = container.add_stream(spec.codec, rate=sample_rate, layout="mono")
    if spec.bit_rate is not None:
        stream.bit_rate = spec.bit_rate
    return container, stream


class _Sink:
    """Where the muxer writes: bytes kept until taken. No seek, so muxers write for a stream."""

    def __init__(self):
        self.parts: list[bytes] = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


class StreamEncoder:
    def __init__(self, response_format: str, sample_rate: int = SAMPLE_RATE):
        self._sink = _Sink()
        self._container, self._stream = _open(self._sink, response_format, sample_rate)
        self._rate, self._pts = sample_rate, 0

    def add(self, pcm: bytes) -> bytes:
        """16-bit little-endian mono PCM in; the encoded bytes ready so far out (maybe none)."""
        frame = _frame(pcm, self._rate, self._pts)
        self._pts += frame.samples
        return self._mux(self._stream.encode(frame))

    def finish(self) -> bytes:
        """The encoder flushed and the stream closed: the rest of the bytes."""
        data = self._mux(self._stream.encode(None))
        self._container.close()
        return data + self._sink.take()

    def _mux(self, packets) -> bytes:
        for packet in packets:
            self._container.mux(packet)
        return self._sink.take()


def encode_whole(response_format: str, pcm: bytes, sample_rate: int = SAMPLE_RATE) -> bytes:
    """A whole answer: the same encoder into a seekable buffer, so the muxer completes its header at
    the end (FLAC's STREAMINFO with the length and MD5; mp3's Xing/LAME header with the encoder
    delay, which decoders use to drop the priming; MP4's edit list for aac)."""
    buffer = io.BytesIO()
    container, stream = _open(buffer, response_format, sample_rate, whole=True)
    with container:
        for packet in [*stream.encode(_frame(pcm, sample_rate, 0)), *stream.encode(None)]:
            container.mux(packet)
    return buffer.getvalue()


def _frame(pcm: bytes, sample_rate: int, pts: int) -> av.AudioFrame:
    samples = np.frombuffer(pcm, dtype="<i2")[None, :]  # [1, n]
    frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
    frame.sample_rate, frame.pts = sample_rate, pts
    return frame
