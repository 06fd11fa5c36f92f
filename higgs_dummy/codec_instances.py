"""Ready-built fixture codecs for tests, cached per process, and a single-thread guard.

On a small shared CPU, torch's intra-op threads fight over the cores and a tiny decode slows
down ~10x; tests decode under `one_torch_thread()`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch

from higgs_dummy.codec_weights import codec_config, codec_state_dict
from reference.codec.model import Codec


@functools.lru_cache(maxsize=4)
def fixture_codec(size: str = "tiny", seed: int = 0) -> Codec:
    """The seeded fixture codec of a size, in the transformers layout (float32, CPU). Do not mutate."""
    cfg = codec_config(size)
    return Codec.from_state_dict(cfg, codec_state_dict(cfg, seed))


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
