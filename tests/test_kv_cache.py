"""The talker's KV cache size on a CPU (reference/talker/kv_cache.py), on stand-ins for vLLM's config:
the profile's slots and length at the engine's bytes a token, an explicit size, the environment's
GiB first, and each bad value refused naming its setting. The served case: tests/test_serve_quickstart.py."""

from types import SimpleNamespace

import pytest
import torch

from reference.talker import kv_cache

TINY = {"layers": 2, "heads": 2, "head": 32}  # higgs_dummy's tiny text config
FOUR_B = {"layers": 36, "heads": 8, "head": 128}  # ... and the 4b's


def config(shape=TINY, dtype=torch.bfloat16, cache_dtype="auto", seqs=16, length=4096, explicit=None):
    model = SimpleNamespace(dtype=dtype, max_model_len=length, get_num_layers=lambda p: shape["layers"],
                            get_num_kv_heads=lambda p: shape["heads"], get_head_size=lambda: shape["head"])
    return SimpleNamespace(model_config=model, parallel_config=None,
                           cache_config=SimpleNamespace(cache_dtype=cache_dtype, kv_cache_memory_bytes=explicit),
                           scheduler_config=SimpleNamespace(max_num_seqs=seqs))


@pytest.mark.parametrize("shape, dtype, cache_dtype, expected", [
    (TINY, torch.bfloat16, "auto", 16 * 4096 * 512),
    (TINY, torch.float32, "auto", 16 * 4096 * 1024),  # the quickstart's server (float32 on a CPU): 64 MiB
    (FOUR_B, torch.bfloat16, "auto", 16 * 4096 * 147456),  # the 4b in bfloat16: 9 GiB (18 in the CPU's float32)
    (FOUR_B, torch.bfloat16, "fp8_e4m3", 16 * 4096 * 73728),
])
def test_without_a_size_every_slot_holds_a_full_length_request(shape, dtype, cache_dtype, expected):
    vllm_config = config(shape, dtype, cache_dtype)
    line = kv_cache.reserve(vllm_config, environ={})
    assert vllm_config.cache_config.kv_cache_memory_bytes == expected
    assert "max_num_seqs 16 requests x max_model_len 4096 tokens" in line, line
    assert f"{shape['layers']} layers x {shape['heads']} KV heads x {shape['head']} x K and V" in line, line


def test_an_explicit_size_is_kept_and_the_environment_goes_first():
    vllm_config = config(explicit=3 << 20)
    assert "3.0 MiB reserved: kv_cache_memory_bytes (stages.0.kv_cache_memory_bytes)" in kv_cache.reserve(
        vllm_config, environ={})
    assert vllm_config.cache_config.kv_cache_memory_bytes == 3 << 20
    vllm_config = config(explicit=1 << 30)  # vLLM's CPU platform took the variable into the config
    line = kv_cache.reserve(vllm_config, environ={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert "1.00 GiB reserved: VLLM_CPU_KVCACHE_SPACE=1 in the environment" in line, line


@pytest.mark.parametrize("environ, explicit, named", [
    ({"VLLM_CPU_KVCACHE_SPACE": "0"}, None, "VLLM_CPU_KVCACHE_SPACE='0': must be a whole number of GiB >= 1"),
    ({"VLLM_CPU_KVCACHE_SPACE": "2.5"}, None, "VLLM_CPU_KVCACHE_SPACE='2.5'"),
    ({}, 0, "stages.0.kv_cache_memory_bytes): must be a positive number of bytes, got 0"),
])
def test_a_size_that_is_not_one_is_refused_naming_its_setting(environ, explicit, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        kv_cache.reserve(config(explicit=explicit), environ=environ)


def test_a_size_past_the_free_memory_is_refused_before_any_engine_starts(monkeypatch):
    monkeypatch.setattr(kv_cache.psutil, "virtual_memory", lambda: SimpleNamespace(available=4 << 30))
    vllm_config = config(FOUR_B)
    with pytest.raises(ValueError, match=r"needs 9.00 GiB .* more than the 4.00 GiB this machine has available: "
                                         r"lower stages.0.max_num_seqs or stages.0.max_model_len"):
        kv_cache.reserve(vllm_config, environ={})
    assert vllm_config.cache_config.kv_cache_memory_bytes is None
