"""The talker's sampling step replayed from CUDA graphs (Model Runner V2, switch sampler_cudagraphs).

vLLM replays the backbone's forward from its graphs, but calls the sampler eagerly after it: there
the step over slots (`TalkerSlots.sample`, reference/talker/slots.py: the gathers by slot,
reference/talker/step.py's some 150 small kernels, the write of the new codes, the code channel's
ids) would launch every kernel from Python each decode step, host time that bounds the step
(benchmarks/results/2026-12-01-h200-step-breakdown/NOTES.md, 2026-12-07-h200-listeners/NOTES.md).
Here it is captured once per batch bucket (reference/cuda_graphs.py) and replayed: the same kernels,
the same draws and writes (every row depends on its own inputs alone, and a padding row samples
nothing, so it writes only the discard column: tests/test_talker_slots.py), a handful of launches.

The graphs are captured at the first call outside a capture (vLLM's profiling run calls the
sampler before serving), which synchronises the device once, with that call's dtypes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reference.cuda_graphs import BucketGraphs


class StepGraphs:
    def __init__(self, step: Callable, max_batch: int, device: torch.device | str) -> None:
        self.step = step
        self.graphs = BucketGraphs(step, max_batch, device, owner="StepGraphs")

    @property
    def replays(self) -> int:
        return self.graphs.replays

    @property
    def buckets(self) -> list[int]:
        """The batch sizes captured so far."""
        return sorted({bucket for bucket, _ in self.graphs.captured})

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """step(*inputs), from a graph where one holds the batch."""
        if not self.graphs.captured and not torch.cuda.is_current_stream_capturing():
            try:
                self.graphs.capture(*inputs)
            except RuntimeError as exc:
                raise RuntimeError(f"capturing the talker's sampling step in CUDA graphs failed ({exc}); "
                                   "set features.sampler_cudagraphs: false to launch it eagerly") from exc
        replayed = self.graphs(*inputs)
        if replayed is None:  # a batch larger than any bucket (the profiling run's), other dtypes, or inside a capture
            return self.step(*inputs)
        return tuple(out.clone() for out in replayed)  # the graph's outputs are overwritten by its next replay
