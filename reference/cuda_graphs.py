"""A function of batch-major tensors replayed from CUDA graphs, one graph per batch bucket.

Launched from Python, a function of many small kernels costs host time on every call; a CUDA
graph replays them all at once. `BucketGraphs` captures `fn` for batch buckets (1, 2, 4, then every
8 up to the largest batch, and that batch) and per call replays the smallest bucket that holds the
batch: the inputs are copied into the graph's own tensors, the rows past the batch zeroed, and the
outputs are the graph's tensors cut to the batch, valid until the next replay (copy what you keep).

`fn` must treat every row on its own (the padding rows never reach a real row), synchronise
nothing with the host, and take inputs whose shapes past the batch and dtypes pick its graph (a
call with others is not replayed: `__call__` answers None and the caller runs `fn` itself).

Users: the codec's decode (reference/codec/graphs.py, a graph per window length) and the talker's
sampling step under Model Runner V2 (reference/talker/step_graphs.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Key = tuple  # the inputs' (shape past the batch, dtype), one pair per input


def batch_buckets(max_batch: int) -> list[int]:
    """The batch sizes captured for batches of up to max_batch."""
    return sorted({b for b in (1, 2, 4) if b < max_batch} | set(range(8, max_batch, 8)) | {max_batch})


def shape_key(tensors) -> Key:
    return tuple((tuple(t.shape[1:]), t.dtype) for t in tensors)


class BucketGraphs:
    def __init__(self, fn: Callable, max_batch: int, device: torch.device | str, owner: str = "BucketGraphs"):
        if torch.device(device).type != "cuda":
            raise ValueError(f"{owner}: CUDA graphs need a CUDA device, got {device}")
        self.fn = fn
        self.buckets = batch_buckets(max_batch)
        self.replays = 0
        self._graphs: dict[tuple[int, Key], tuple[torch.cuda.CUDAGraph, tuple, object]] = {}
        self._pool = None

    @property
    def captured(self) -> list[tuple[int, Key]]:
        """(bucket, key) of every graph, in capture order."""
        return list(self._graphs)

    def capture(self, *examples: torch.Tensor) -> None:
        """A graph per bucket for inputs shaped as `examples` past their batch dimension, the
        largest bucket first (the smaller ones then take their memory from what it left in the
        shared pool). Blocking: it synchronises the device."""
        key = shape_key(examples)
        for bucket in reversed(self.buckets):
            if (bucket, key) not in self._graphs:
                self._capture(bucket, key, examples)

    def _capture(self, bucket: int, key: Key, examples: tuple[torch.Tensor, ...]) -> None:
        inputs = tuple(torch.zeros((bucket, *x.shape[1:]), dtype=x.dtype, device=x.device) for x in examples)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # as torch.cuda.make_graphed_callables: warm before capturing
            for _ in range(2):
                self.fn(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            outputs = self.fn(*inputs)
        self._pool = graph.pool()
        self._graphs[(bucket, key)] = (graph, inputs, outputs)

    def __call__(self, *inputs: torch.Tensor):
        """fn(*inputs) from a graph's replay, its outputs cut to the batch (valid until the next
        replay), or None when no graph holds this batch and these shapes."""
        batch = inputs[0].shape[0]
        bucket = next((b for b in self.buckets if b >= batch), None)
        entry = self._graphs.get((bucket, shape_key(inputs)))
        if entry is None:
            return None
        graph, static, outputs = entry
        for target, source in zip(static, inputs):
            target[:batch].copy_(source)
            if batch < bucket:
                target[batch:].zero_()
        graph.replay()
        self.replays += 1
        if isinstance(outputs, torch.Tensor):
            return outputs[:batch]
        return tuple(out[:batch] for out in outputs)
