"""The talker's KV cache on a CPU: a size the launcher chooses, never vLLM's share of the machine.

Told no size, vLLM's CPU worker reserves `gpu_memory_utilization` of the machine's memory (0.8 in
the profiles) less what its process holds: 18 GiB of a 23.5 GiB machine for a 78 MB model. The size
vLLM's CPU worker takes is `cache_config.kv_cache_memory_bytes`; it comes from, first match:
- VLLM_CPU_KVCACHE_SPACE (GiB) in the environment: vLLM's CPU platform puts it before any engine
  argument (tox and the suite's conftest.py set 1);
- the engine argument kv_cache_memory_bytes (a profile's `stages.0.kv_cache_memory_bytes`, or `--set`);
- otherwise `max_num_seqs` requests of `max_model_len` tokens at the engine's bytes per token (K and
  V of every attention layer, in the KV cache's dtype): every talker slot holds a full-length request.
`reserve(vllm_config)` settles it before the engine starts and returns the boot log's line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil
import torch

SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"
GiB = 1 << 30


@dataclass(frozen=True)
class Reservation:
    bytes: int
    why: str

    def line(self) -> str:
        return f"KV cache on the CPU: {_size(self.bytes)} reserved: {self.why}"


def _size(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / (1 << 20):.1f} MiB"


def token_bytes(vllm_config) -> tuple[int, str]:
    """Bytes of KV cache per token, and how they add up."""
    model, parallel = vllm_config.model_config, vllm_config.parallel_config
    cache_dtype = vllm_config.cache_config.cache_dtype
    dtype = model.dtype if cache_dtype == "auto" else None
    element = 1 if cache_dtype.startswith("fp8") else (dtype or getattr(torch, cache_dtype)).itemsize
    layers, heads, head = model.get_num_layers(parallel), model.get_num_kv_heads(parallel), model.get_head_size()
    name = str(dtype).removeprefix("torch.") if dtype is not None else cache_dtype
    return 2 * layers * heads * head * element, f"{layers} layers x {heads} KV heads x {head} x K and V x {name}"


def space_gib(environ=os.environ) -> int | None:
    """VLLM_CPU_KVCACHE_SPACE in GiB, None when unset; ValueError naming it unless a whole number >= 1
    (vLLM would stop on int()'s message, or reserve 0 bytes)."""
    text = environ.get(SPACE_ENV, "")
    if not text:
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"{SPACE_ENV}={text!r}: must be a whole number of GiB >= 1, or unset (the size then comes "
                         "from the deploy profile)")
    return int(text)


def chosen(vllm_config, environ=os.environ) -> Reservation:
    """The size and why, without reserving anything. ValueError names a setting that is not a size."""
    cache = vllm_config.cache_config
    if (space := space_gib(environ)) is not None:  # vLLM has taken it into kv_cache_memory_bytes
        return Reservation(space * GiB, f"{SPACE_ENV}={space} in the environment (vLLM's CPU platform puts it "
                                        "before the engine arguments)")
    if cache.kv_cache_memory_bytes is not None:
        if cache.kv_cache_memory_bytes < 1:
            raise ValueError(f"kv_cache_memory_bytes (stages.0.kv_cache_memory_bytes): must be a positive number of "
                             f"bytes, got {cache.kv_cache_memory_bytes}")
        return Reservation(cache.kv_cache_memory_bytes, "kv_cache_memory_bytes (stages.0.kv_cache_memory_bytes)")
    seqs, length = vllm_config.scheduler_config.max_num_seqs, vllm_config.model_config.max_model_len
    per_token, parts = token_bytes(vllm_config)
    return Reservation(seqs * length * per_token,
                       f"max_num_seqs {seqs} requests x max_model_len {length} tokens x {per_token} bytes a token "
                       f"({parts}): every talker slot holds a full-length request")


def reserve(vllm_config, environ=os.environ) -> str:
    """Sets the config's kv_cache_memory_bytes (the chosen size) and returns the log line. A size over
    the memory available now is a ValueError naming the settings, before any engine process starts."""
    reservation = chosen(vllm_config, environ)
    available = psutil.virtual_memory().available
    if reservation.bytes > available:
        lower = (f"lower {SPACE_ENV}" if space_gib(environ) is not None else
                 "lower stages.0.max_num_seqs or stages.0.max_model_len (--set KEY=VALUE), or set "
                 "stages.0.kv_cache_memory_bytes")
        raise ValueError(f"the talker's KV cache needs {_size(reservation.bytes)} ({reservation.why}), more than the "
                         f"{_size(available)} this machine has available: {lower}")
    vllm_config.cache_config.kv_cache_memory_bytes = reservation.bytes
    return reservation.line()
