"""Ready-built fixture codecs for tests, cached per process, and a single-thread guard.

On a small shared CPU, torch's intra-op threads fight over the cores and a tiny decode slows
down ~10x; tests decode under `one_torch_thread()`: one thread, or HIGGS_TORCH_THREADS of them
(conformance/tools/robust.py runs the suite with 2, to show the pinned figures do not depend on it).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import torch

from higgs_dummy.codec_weights import codec_config, codec_state_dict
from reference.codec.model import Codec

THREADS_ENV = "HIGGS_TORCH_THREADS"


@functools.lru_cache(maxsize=4)
def fixture_codec(size: str = "tiny", seed: int = 0) -> Codec:
    """The seeded fixture codec of a size, in the transformers layout (float32, CPU). Do not mutate."""
    cfg = codec_config(size)
    return Codec.from_state_dict(cfg, codec_state_dict(cfg, seed))


def decode_threads() -> int:
    """The torch threads a test decodes with: $HIGGS_TORCH_THREADS, else 1."""
    value = os.environ.get(THREADS_ENV, "1")
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{THREADS_ENV}={value!r}: expected a whole number of threads, 1 or more (unset: 1)")
    return int(value)


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(decode_threads())
    try:
        yield
    finally:
        torch.set_num_threads(before)
