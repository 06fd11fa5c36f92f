"""The talker's sampling step replayed from CUDA graphs (Model Runner V2, switch sampler_cudagraphs).

vLLM replays the backbone's forward from its graphs, but calls the sampler eagerly after it: there
reference/talker/step.py launches some 150 small kernels a decode step, about 2 ms of host time on
the H200 against 0.3-0.45 ms of device time (benchmarks/results/2026-12-01-h200-step-breakdown/NOTES.md).
Here the step is captured once per batch bucket (reference/cuda_graphs.py) and replayed: the same kernels,
the same draws (every row of the step depends on its own inputs alone, so the padding rows of a
bucket change nothing: tests/test_talker_step.py), a handful of launches.

The graphs are captured at the first call outside a capture (vLLM's profiling run calls the
sampler before serving), which synchronises the device once.
"""

from __future__ import annotations

import torch

from reference.cuda_graphs import BucketGraphs
from reference.talker.step import talker_step


class StepGraphs:
    def __init__(self, max_batch: int, device: torch.device | str) -> None:
        self.graphs = BucketGraphs(talker_step, max_batch, device, owner="StepGraphs")

    @property
    def replays(self) -> int:
        return self.graphs.replays

    @property
    def buckets(self) -> list[int]:
        """The batch sizes captured so far."""
        return sorted({bucket for bucket, _ in self.graphs.captured})

    def __call__(self, audio_logits, prev_row, step, temperature, top_k, top_p, seed) -> tuple[torch.Tensor, ...]:
        """talker_step's (codes [B, 8], done [B]), from a graph where one holds the batch."""
        inputs = (audio_logits.float(), prev_row.long(), step.long(), temperature.float(), top_k.long(),
                  top_p.float(), seed.long())  # the dtypes the graphs were captured with
        if not self.graphs.captured and not torch.cuda.is_current_stream_capturing():
            try:
                self.graphs.capture(*inputs)
            except RuntimeError as exc:
                raise RuntimeError(f"capturing the talker's sampling step in CUDA graphs failed ({exc}); "
                                   "set features.sampler_cudagraphs: false to launch it eagerly") from exc
        replayed = self.graphs(*inputs)
        if replayed is None:  # a batch larger than any bucket (the profiling run's), or inside a capture
            return talker_step(*inputs)
        codes, done = replayed
        return codes.clone(), done.clone()  # the graph's outputs are overwritten by its next replay
