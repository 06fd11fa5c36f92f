"""CUDA graphs of the carried decode's steps (reference/codec/carried.py), one per (batch bucket,
new frames).

A carried step launches some 400 kernels from Python; in the server's process that host time is
the event loop's too. The stage's streams take few counts of new frames (CodecStage.warm lists
them), so the stage captures each for every bucket at its start (reference/cuda_graphs.py's
buckets, padding and capture). A padded row holds slot 0 of the StatePool, which no stream holds:
its state is read and written, and its PCM dropped. A stream's last step (its zero frames) and any
other count of new frames run eagerly, as does every step once the pool has grown past the slots
the graphs were captured on (`generation`).
"""

from __future__ import annotations

import logging

import torch

from reference.codec.carried import NO_END, StatePool
from reference.cuda_graphs import BucketGraphs

log = logging.getLogger(__name__)


class CarriedGraphs:
    def __init__(self, pool: StatePool, max_batch: int) -> None:
        self.pool = pool
        self.graphs = BucketGraphs(pool.step_codes, max_batch, pool.decoder.codec.codebooks.device,
                                   owner="CarriedGraphs")
        self.generation = pool.generation
        self._warned = False

    @property
    def captured(self) -> list[tuple[int, int]]:
        """(bucket, new frames) of every graph, in capture order."""
        return [(bucket, key[0][0][-1]) for bucket, key in self.graphs.captured]

    def capture(self, new_frames: list[int]) -> None:
        """A graph per bucket for each count of new frames."""
        device = self.pool.decoder.codec.codebooks.device
        books = self.pool.decoder.codec.cfg.num_codebooks
        for n in new_frames:
            self.graphs.capture(torch.zeros(1, books, n, dtype=torch.long, device=device),
                                torch.zeros(1, dtype=torch.long, device=device),
                                torch.zeros(1, dtype=torch.long, device=device),
                                torch.full((1,), NO_END, dtype=torch.long, device=device))

    def __call__(self, codes: torch.Tensor, slots: torch.Tensor, starts: torch.Tensor,
                 ends: torch.Tensor) -> torch.Tensor | None:
        """PCM [B, n * 960] from a replay (valid until the next one), or None where no graph holds
        this batch and count of new frames, or the pool has moved since the capture."""
        if self.pool.generation != self.generation:
            if not self._warned:
                log.warning("carried decode: the state pool grew past the %d slots its CUDA graphs hold; "
                            "steps run eagerly from now on (raise stages.1.max_num_seqs)", self.pool.capacity // 2 - 1)
                self._warned = True
            return None
        return self.graphs(codes, slots, starts, ends)
