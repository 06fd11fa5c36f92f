"""CUDA graphs of the codec's decode, one per (batch bucket, window length).

An eager decode launches some 300 kernels from Python, in the server's process: on the H200 a
window alone took 5.5 ms, replayed from a graph 2.0-2.8 ms (docs/speed.md). A stream's windows take
few lengths (CodecStage.warm lists them), so the stage captures every length for each bucket at
its start:

- buckets: 1, 2, 4, then multiples of 8 up to the codec batch (and the batch itself);
- a batch replays the smallest bucket that holds it, the rows past the batch set to code 0 and
  their PCM dropped: the RVQ and the decoder's convolutions never mix a batch's items, so the
  rows only change which algorithm cuDNN runs (float rounding, as any batch size does);
- a window of any other length (a stream's last chunk, a whole clip) decodes eagerly.

The graphs share one memory pool and replay one at a time (the stage's one worker): a replay's
PCM is valid until the next replay, so its reader copies what it keeps first (CodecStage does).
"""

from __future__ import annotations

import torch

from reference.codec.model import Codec


def batch_buckets(max_batch: int) -> list[int]:
    """The batch sizes captured for a codec batch of max_batch."""
    return sorted({b for b in (1, 2, 4) if b < max_batch} | set(range(8, max_batch, 8)) | {max_batch})


class DecodeGraphs:
    def __init__(self, codec: Codec, max_batch: int) -> None:
        if codec.codebooks.device.type != "cuda":
            raise ValueError(f"DecodeGraphs: CUDA graphs need the codec on a CUDA device, it is on "
                             f"{codec.codebooks.device}")
        self.codec = codec
        self.buckets = batch_buckets(max_batch)
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self._pool = None

    @property
    def captured(self) -> list[tuple[int, int]]:
        """(bucket, window length) of every graph, in capture order."""
        return list(self._graphs)

    def capture(self, lengths: list[int]) -> None:
        """A graph per bucket for each window length, the largest bucket of a length first (the
        smaller ones then take their memory from what it left in the shared pool)."""
        for length in lengths:
            for bucket in reversed(self.buckets):
                if (bucket, length) not in self._graphs:
                    self._capture(bucket, length)

    def _capture(self, bucket: int, length: int) -> None:
        codes = torch.zeros(bucket, self.codec.cfg.num_codebooks, length, dtype=torch.long,
                            device=self.codec.codebooks.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # as torch.cuda.make_graphed_callables: warm before capturing
            for _ in range(2):
                self.codec.decode_checked(codes)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            pcm = self.codec.decode_checked(codes)
        self._pool = graph.pool()
        self._graphs[(bucket, length)] = (graph, codes, pcm)

    def decode(self, codes: torch.Tensor) -> torch.Tensor | None:
        """codes [B, 8, T] -> PCM [B, T * 960] from a graph's replay (valid until the next replay), or
        None when no graph holds that length and batch. Checks the codes as Codec.decode_batch does
        (a code out of range would read past the codebook inside the graph)."""
        batch, length = codes.shape[0], codes.shape[2]
        bucket = next((b for b in self.buckets if b >= batch), None)
        if (bucket, length) not in self._graphs:
            return None
        for window in codes:
            self.codec.check_codes(window)
        graph, static_codes, static_pcm = self._graphs[(bucket, length)]
        static_codes[:batch].copy_(codes)
        static_codes[batch:].zero_()
        graph.replay()
        return static_pcm[:batch]
