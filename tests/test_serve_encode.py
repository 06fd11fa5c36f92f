"""The compressed answers (reference/serve/encode.py) judged as the server's checks judge them
(conformance/serving/encoded_audio.py), on two synthetic signals, speech-like and noise, streamed
in 1 s chunks and whole: every format decodes, by another decoder, within the case file's bound,
and the bound fails for a dropped chunk, a cut tail and a wrong rate."""

import io

import av
import numpy as np
import pytest

from conformance import case_files
from conformance.serving.encoded_audio import judge, measure
from reference.serve.encode import FORMATS, StreamEncoder, encode_whole

RATE = 24000
BOUNDS = case_files.load("serving/server")["formats"]
CHUNK_BYTES = 2 * RATE  # 1 s of 16-bit PCM


def speech_like(seconds: float = 4.0, seed: int = 0) -> bytes:
    """A gliding 120 Hz voice of 29 harmonics, syllable-rate envelope, a little breath noise."""
    rng, t = np.random.default_rng(seed), np.arange(int(RATE * seconds)) / RATE
    phase = 2 * np.pi * np.cumsum(120 + 30 * np.sin(2 * np.pi * 0.7 * t)) / RATE
    voice = sum(np.sin(k * phase) / k for k in range(1, 30)) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2)
    return _pcm(0.15 * voice + 0.02 * rng.standard_normal(t.size))


def noise(seconds: float = 4.0, seed: int = 1) -> bytes:
    return _pcm(0.2 * np.random.default_rng(seed).standard_normal(int(RATE * seconds)))


def _pcm(x: np.ndarray) -> bytes:
    return (np.clip(x, -1, 1) * 32767).astype("<i2").tobytes()


def streamed(fmt: str, pcm: bytes, rate: int = RATE, drop: int | None = None) -> bytes:
    chunks = [pcm[i : i + CHUNK_BYTES] for i in range(0, len(pcm), CHUNK_BYTES)]
    if drop is not None:
        del chunks[drop]
    encoder = StreamEncoder(fmt, rate)
    return b"".join(encoder.add(c) for c in chunks) + encoder.finish()


SIGNALS = {"speech_like": speech_like(), "noise": noise()}


@pytest.mark.parametrize("signal", sorted(SIGNALS))
@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_each_format_decodes_to_the_pcm_streamed_and_whole(fmt, signal):
    pcm = SIGNALS[signal]
    for is_streamed, data in ((True, streamed(fmt, pcm)), (False, encode_whole(fmt, pcm))):
        print(f"{fmt} {signal} {'streamed' if is_streamed else 'whole'}: {judge(fmt, data, pcm, is_streamed, BOUNDS[fmt])}")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_streamed_answer_is_chunking_blind(fmt):
    """Equal PCM makes equal bytes however it is cut (the encoder reframes; no random Ogg serial)."""
    pcm = SIGNALS["speech_like"]
    encoder = StreamEncoder(fmt)
    odd = b"".join(encoder.add(pcm[i : i + 2 * 777]) for i in range(0, len(pcm), 2 * 777)) + encoder.finish()
    assert odd == streamed(fmt, pcm)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("defect", ["dropped_chunk", "cut_tail", "wrong_rate"])
def test_the_bound_fails_a_dropped_chunk_a_cut_tail_and_a_wrong_rate(fmt, defect):
    pcm = SIGNALS["speech_like"]
    if defect == "wrong_rate" and fmt == "opus":
        pytest.skip("libopus encodes 8, 12, 16, 24 or 48 kHz only: 22050 is refused at open")
    data = {"dropped_chunk": lambda: streamed(fmt, pcm, drop=1), "cut_tail": lambda: streamed(fmt, pcm[:-CHUNK_BYTES]),
            "wrong_rate": lambda: streamed(fmt, pcm, rate=22050)}[defect]()
    with pytest.raises(AssertionError) as failed:
        judge(fmt, data, pcm, True, BOUNDS[fmt])
    print(f"{fmt} {defect}: {failed.value}")
    if defect != "wrong_rate" and not BOUNDS[fmt].get("exact"):
        measured = measure(fmt, data, pcm, True)
        assert measured.mel_db > 3 * BOUNDS[fmt]["max_mel_db"], measured  # far past the bound, not at its edge


@pytest.mark.parametrize("fmt", sorted(f for f in FORMATS if BOUNDS[f].get("exact")))
def test_a_lossless_answer_one_step_off_is_refused_with_its_distance(fmt):
    """A lossless answer quantized otherwise than the PCM answer (vllm-omni 0.30.0's: its PCM floors, its FLAC rounds)
    is refused, and the refusal says how many samples differ and by how many steps."""
    pcm = np.frombuffer(SIGNALS["noise"], dtype="<i2")
    off = pcm.copy()
    off[::2] = np.where(off[::2] < 32767, off[::2] + 1, off[::2] - 1)
    with pytest.raises(AssertionError, match=rf"{fmt}: {len(pcm) // 2} of {len(pcm)} samples differ, by up to 1 steps"):
        judge(fmt, encode_whole(fmt, off.tobytes()), pcm.tobytes(), False, BOUNDS[fmt])


def _decodable_seconds(data: bytes) -> float:
    """The audio FFmpeg's decoder gets from the bytes a client has so far (a prefix of the stream)."""
    if not data:
        return 0.0
    try:
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.audio[0]
            return sum(frame.samples / frame.sample_rate for packet in container.demux(stream)
                       for frame in packet.decode())
    except av.error.InvalidDataError:  # not even a header yet
        return 0.0


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_streamed_answer_carries_each_chunks_audio_as_it_goes(fmt):
    """After each 200 ms chunk of PCM the bytes sent so far decode to all of it but the encoder's
    frame and look-ahead (at most 100 ms behind): nothing waits for a container page to fill (Ogg's
    default 1 s pages held an opus stream's first audio back about 2 s)."""
    pcm, step = speech_like(2.0), 2 * RATE // 5  # bytes of 200 ms
    encoder, sent = StreamEncoder(fmt), b""
    for n, at in enumerate(range(0, len(pcm), step), start=1):
        sent += encoder.add(pcm[at:at + step])
        assert _decodable_seconds(sent) >= 0.2 * n - 0.1, f"{fmt}: after {0.2 * n:.1f} s of PCM"


# A whole answer's header declares the encoder's priming (mp3: the LAME header; aac: MP4's edit
# list), so the decoder drops it: the audio starts at sample 0. The end: mp3's header also declares
# the padding (exact length); FFmpeg's MP4 demuxer applies the edit list's start but keeps the last
# AAC frame whole, so up to 1023 samples of its padding follow the audio.
WHOLE_PADDING = {"mp3": 0, "aac": 1023}


@pytest.mark.parametrize("fmt", sorted(WHOLE_PADDING))
def test_a_whole_answer_decodes_without_priming(fmt):
    for seconds in (1.0, 2.0 + 333 / RATE):
        pcm = speech_like(seconds)
        measured = measure(fmt, encode_whole(fmt, pcm), pcm, streamed=False)
        assert measured.lag == 0 and 0 <= measured.extra <= WHOLE_PADDING[fmt], f"{fmt} whole: {measured}"
