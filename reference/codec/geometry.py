"""The shape of a streamed audio chunk sequence, in codec frames (1 frame = 960 samples = 40 ms)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamGeometry:
    """How the talker's frames are cut into codec windows while streaming.

    first_chunk_frames: frames emitted in the first chunk (latency of the first audio).
    chunk_frames: frames emitted by every later chunk (with growing_chunks: at most).
    left_context_frames: already-emitted frames decoded again in front of a chunk, then trimmed.
    right_holdback_frames: frames decoded after a chunk but not emitted until the next one.
    growing_chunks: each later chunk emits as many frames as all chunks before it, up to chunk_frames
        (8, 8, 16, 25, 25, ...). While the talker makes a frame in at most half the 40 ms it plays,
        the audio already sent outlasts the making of each next chunk, so a player never waits
        between a short first chunk and the first whole one (with chunks of one size, a short
        first chunk plays out before the second is made). Off: first_chunk_frames, then
        chunk_frames (upstream's chunking).
    """

    first_chunk_frames: int
    chunk_frames: int
    left_context_frames: int
    right_holdback_frames: int
    growing_chunks: bool = False

    def __post_init__(self) -> None:
        for name in ("first_chunk_frames", "chunk_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"StreamGeometry.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("left_context_frames", "right_holdback_frames"):
            if getattr(self, name) < 0:
                raise ValueError(f"StreamGeometry.{name} must be >= 0, got {getattr(self, name)}")
        if not isinstance(self.growing_chunks, bool):
            raise ValueError(f"StreamGeometry.growing_chunks must be a bool, got {self.growing_chunks!r}")

    def chunk_size(self, emitted: int) -> int:
        """Frames of the chunk that starts once `emitted` frames have been emitted (a stream's last
        chunk is cut short by its end)."""
        if emitted == 0:
            return self.first_chunk_frames
        return min(self.chunk_frames, emitted) if self.growing_chunks else self.chunk_frames

    def ramp_frames(self) -> int:
        """Frames emitted before the first chunk of chunk_frames (the first chunk's alone when chunks
        do not grow)."""
        emitted = self.first_chunk_frames
        while self.chunk_size(emitted) < self.chunk_frames:
            emitted += self.chunk_size(emitted)
        return emitted


# Upstream Model Runner V1 profiles: 1-frame first chunk (~40 ms), then 25-frame chunks.
UPSTREAM_V1 = StreamGeometry(first_chunk_frames=1, chunk_frames=25, left_context_frames=25, right_holdback_frames=4)
# Upstream Model Runner V2 default: the first chunk is one 8-frame codec window, no holdback.
UPSTREAM_V2 = StreamGeometry(first_chunk_frames=8, chunk_frames=25, left_context_frames=8, right_holdback_frames=0)
# What we ship (the default profile under V2): the first chunk is one 8-frame codec window, and
# left context and holdback cover the decoder's 10-frame receptive field, so the stitched stream
# equals the offline decode to float rounding whatever the weights (conformance/cases/codec/
# streaming.yaml). Cost against upstream V2: the first chunk waits for 10 more talker steps.
# Chunks grow to 25 frames (8, 8, 16, 25): with a 25-frame second chunk, 64 streams on the H200
# (31 ms a step while they started) played out the first 0.32 s of audio 0.46 s before the next
# second of it arrived (benchmarks/results/2026-12-03-h200-race/NOTES.md).
DEFAULT_GEOMETRY = StreamGeometry(
    first_chunk_frames=8, chunk_frames=25, left_context_frames=10, right_holdback_frames=10, growing_chunks=True
)
