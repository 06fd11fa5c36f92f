"""`speed`: the answer played faster or slower at the same pitch, by Rubber Band's time stretcher.

Through pylibrb (Rubber Band's C++ library, bundled in its wheel), in Rubber Band's real-time mode:
the stretcher takes the audio chunk by chunk and keeps its state from one chunk to the next, so
a streamed answer is stretched as it goes, with no seam at the chunk edges (pedalboard's
`time_stretch`, the same library, takes one whole buffer only). The stretcher is fed Rubber
Band's preferred start pad of silence first and its start delay is dropped from its output, so
the first sample out is the first sample in; it takes the input in blocks of BLOCK samples however
the chunks fall, so a streamed answer is sample for sample the whole one; at the end the output is
cut to the input's length over `speed` (the flush returns the tail of its last window too), so the
length scales exactly.
Speed 1.0 never reaches the stretcher: its bytes are the talker's. Rubber Band is GPL (as is
pedalboard, which bundles it); pylibrb is imported only by a request at another speed.
"""

from __future__ import annotations

import numpy as np

SPEED_RANGE = (0.25, 4.0)  # OpenAI's
SAMPLE_RATE = 24000
BLOCK = 1024  # input samples per call of the stretcher, however the chunks fall: a stream equals its whole


class Tempo:
    """16-bit mono PCM in, the same played at `speed` out (bytes of 16-bit PCM), chunk by chunk."""

    def __init__(self, speed: float, sample_rate: int = SAMPLE_RATE):
        low, high = SPEED_RANGE
        if not low <= speed <= high or speed == 1.0:
            raise ValueError(f"Tempo: speed must be in [{low:g}, {high:g}] and not 1.0 (bypassed), got {speed!r}")
        from pylibrb import Option, RubberBandStretcher  # only a request at another speed needs it

        self.speed = speed
        options = Option.PROCESS_REALTIME | Option.ENGINE_FINER | Option.THREADING_NEVER  # one thread: deterministic
        self._stretcher = RubberBandStretcher(sample_rate, 1, options, initial_time_ratio=1.0 / speed)
        self._stretcher.set_logging_level(0)
        self._stretcher.set_max_process_size(BLOCK)
        self._stretcher.process(np.zeros((1, self._stretcher.get_preferred_start_pad()), dtype=np.float32))
        self._skip = self._stretcher.get_start_delay()  # output samples that belong to the pad
        self._held = np.zeros(0, dtype=np.float32)  # input short of a block
        self._taken = self._given = 0  # input samples taken, output samples given

    def add(self, pcm: bytes) -> bytes:
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        self._taken += samples.shape[0]
        self._held = np.concatenate([self._held, samples])
        whole, out = self._held.shape[0] // BLOCK * BLOCK, []
        for start in range(0, whole, BLOCK):  # each block's output taken at once: the buffers stay small
            self._stretcher.process(self._held[None, start:start + BLOCK])
            out.append(self._retrieve())
        self._held = self._held[whole:]
        return self._out(np.concatenate(out) if out else np.zeros(0, dtype=np.float32), limit=None)

    def finish(self) -> bytes:
        """The rest: the stretcher flushed, cut to the input's length over the speed."""
        self._stretcher.process(np.ascontiguousarray(self._held[None, :]), final=True)
        return self._out(self._retrieve(), limit=round(self._taken / self.speed))

    def _retrieve(self) -> np.ndarray:
        parts = []
        while (ready := self._stretcher.available()) > 0:
            parts.append(self._stretcher.retrieve(ready)[0])
        out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        skipped = min(self._skip, out.shape[0])
        self._skip -= skipped
        return out[skipped:]

    def _out(self, samples: np.ndarray, limit: int | None) -> bytes:
        if limit is not None:
            samples = samples[: max(0, limit - self._given)]
        self._given += samples.shape[0]
        return (np.clip(np.round(samples * 32768.0), -32768, 32767).astype("<i2")).tobytes()


def stretch(pcm: bytes, speed: float) -> bytes:
    """A whole answer at `speed` (speed 1.0: the same bytes)."""
    if speed == 1.0:
        return pcm
    tempo = Tempo(speed)
    return tempo.add(pcm) + tempo.finish()
