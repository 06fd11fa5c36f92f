"""The shape of a streamed audio chunk sequence, in codec frames (1 frame = 960 samples = 40 ms)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class StreamGeometry:
    """How the talker's frames are cut into codec windows while streaming.

    first_chunk_frames: frames emitted in the first chunk (latency of the first audio).
    chunk_frames: frames emitted by every later chunk.
    left_context_frames: already-emitted frames decoded again in front of a chunk, then trimmed.
    right_holdback_frames: frames decoded after a chunk but not emitted until the next one.
    """

    first_chunk_frames: int
    chunk_frames: int
    left_context_frames: int
    right_holdback_frames: int

    def __post_init__(self) -> None:
        for name in ("first_chunk_frames", "chunk_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"StreamGeometry.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("left_context_frames", "right_holdback_frames"):
            if getattr(self, name) < 0:
                raise ValueError(f"StreamGeometry.{name} must be >= 0, got {getattr(self, name)}")


# Upstream Model Runner V1 profiles: 1-frame first chunk (~40 ms), then 25-frame chunks.
UPSTREAM_V1 = StreamGeometry(first_chunk_frames=1, chunk_frames=25, left_context_frames=25, right_holdback_frames=4)
# Upstream Model Runner V2 default: the first chunk is one 8-frame codec window, no holdback.
UPSTREAM_V2 = StreamGeometry(first_chunk_frames=8, chunk_frames=25, left_context_frames=8, right_holdback_frames=0)
# What we ship (the default profile under V2): the first chunk is one 8-frame codec window, and
# left context and holdback cover the decoder's 10-frame receptive field, so the stitched stream
# equals the offline decode to float rounding whatever the weights (conformance/cases/codec/
# streaming.yaml). Cost against upstream V2: the first chunk waits for 10 more talker steps.
DEFAULT_GEOMETRY = StreamGeometry(first_chunk_frames=8, chunk_frames=25, left_context_frames=10, right_holdback_frames=10)
