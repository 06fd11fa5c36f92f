"""The vLLM compatibility layer's readings of the CPU platform: its runner and worker classes, its
attention backend, the read-back of an engine config built here."""

import pytest

from reference import compat

pytestmark = pytest.mark.cpu


def test_runner_kind_tells_the_v1_and_v2_runners_apart():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner as V1Runner
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2Runner

    assert compat.runner_kind(object.__new__(V1Runner)) == "v1"
    assert compat.runner_kind(object.__new__(V2Runner)) == "v2"
    assert compat.runner_kind(object.__new__(type("Sub", (V2Runner,), {}))) == "v2"


def test_the_platform_worker_is_the_cpu_worker_here():
    from vllm.v1.worker.cpu_worker import CPUWorker

    assert compat.platform_worker_base() is CPUWorker


def test_built_settings_reads_what_the_engine_config_holds():
    """The worker's read-back (reference/deploy/readback.py keys) on a real engine config, without
    a runner: every key present, each value the one the engine arguments asked for."""
    from types import SimpleNamespace

    from vllm.engine.arg_utils import EngineArgs

    from higgs_dummy.cache import cached_checkpoint
    from reference.deploy.readback import READBACK_KEYS
    from reference.talker.plugin import register

    register()
    config = EngineArgs(
        model=str(cached_checkpoint("tiny", 0)), skip_tokenizer_init=True, dtype="float32", max_model_len=512,
        max_num_seqs=7, max_num_batched_tokens=640, enable_chunked_prefill=False, enable_prefix_caching=False,
        block_size=64, attention_backend="CPU_ATTN", seed=5, enforce_eager=True, stream_interval=3,
    ).create_engine_config()
    built = compat.built_settings(config, SimpleNamespace())
    assert list(built) == list(READBACK_KEYS)
    assert built == {
        "runner": "v1", "compilation_mode": "NONE", "cudagraph_mode": "NONE", "cudagraph_capture_sizes": [],
        "full_cudagraphs": [], "piecewise_cudagraphs": [], "sampler_cudagraphs": False, "max_num_seqs": 7, "max_model_len": 512,
        "max_num_batched_tokens": 640, "stream_interval": 3, "async_scheduling": False, "enable_chunked_prefill": False,
        "enable_prefix_caching": False, "block_size": 64, "attention_backend": "CPU_ATTN",
        "attention_backend_built": None, "kv_cache_dtype": "auto", "dtype": "float32", "enforce_eager": True, "seed": 5,
        "tensor_parallel_size": 1, "data_parallel_size": 1,
    }


def test_attention_backends_name_the_classes_of_the_attention_groups():
    from types import SimpleNamespace

    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    group = SimpleNamespace(backend=CPUAttentionBackend)
    assert compat.attention_backends(SimpleNamespace(attn_groups=[[group], [group]])) == ["CPU_ATTN"]
    assert compat.attention_backends(SimpleNamespace()) == []
