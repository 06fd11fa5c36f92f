"""CUDA graphs of the codec's decode, one per (batch bucket, window length).

An eager decode launches some 300 kernels from Python, in the server's process: on the H200 a
window alone took 5.5 ms, replayed from a graph 2.0-2.8 ms
(benchmarks/results/2026-12-01-h200-codec-graphs-a/NOTES.md). A stream's windows take few lengths
(CodecStage.warm lists them), so the stage captures every length for each bucket at its start:

- buckets: 1, 2, 4, then multiples of 8 up to the codec batch (and the batch itself);
- a batch replays the smallest bucket that holds it, the rows past the batch set to code 0 and
  their PCM dropped: the RVQ and the decoder's convolutions never mix a batch's items, so the
  rows only change which algorithm cuDNN runs (float rounding, as any batch size does);
- a window of any other length (a stream's last chunk, a whole clip) decodes eagerly.

The bucketing, padding and capture are reference/cuda_graphs.py's. The graphs share one memory pool
and replay one at a time (the stage's one worker): a replay's PCM is valid until the next replay, so
its reader copies what it keeps first (CodecStage does).
"""

from __future__ import annotations

import torch

from reference.codec.model import Codec
from reference.cuda_graphs import BucketGraphs


class DecodeGraphs:
    def __init__(self, codec: Codec, max_batch: int) -> None:
        self.codec = codec
        self.graphs = BucketGraphs(codec.decode_checked, max_batch, codec.codebooks.device, owner="DecodeGraphs")

    @property
    def captured(self) -> list[tuple[int, int]]:
        """(bucket, window length) of every graph, in capture order."""
        # a graph's key: ((codes' shape past the batch, [8, T]), dtype) of its one input
        return [(bucket, shape[-1]) for bucket, ((shape, _),) in self.graphs.captured]

    def capture(self, lengths: list[int]) -> None:
        """A graph per bucket for each window length."""
        for length in lengths:
            self.graphs.capture(torch.zeros(1, self.codec.cfg.num_codebooks, length, dtype=torch.long,
                                            device=self.codec.codebooks.device))

    def decode(self, codes: torch.Tensor) -> torch.Tensor | None:
        """codes [B, 8, T] -> PCM [B, T * 960] from a graph's replay (valid until the next replay), or
        None when no graph holds that length and batch. Checks the codes as Codec.decode_batch does
        (a code out of range would read past the codebook inside the graph)."""
        for window in codes:
            self.codec.check_codes(window)
        return self.graphs(codes.to(torch.long))  # copied into the graph's input on its device
