"""Suite-wide pytest setup: platform skips with reasons that say what to set or run."""

from __future__ import annotations

import os

import pytest

from conformance.environment import REAL_CHECKPOINT_ENV, has_cuda

# CPU engines: a small KV cache unless the caller chose one (vLLM reads it in the worker).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# Engine processes are spawned, never forked: a test process that already holds engines (their
# threads) hung forking the next one on the GPU machine (python warns "use of fork() may lead to
# deadlocks"). vLLM on a CPU spawns anyway.
os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    cuda = has_cuda()
    real = os.environ.get(REAL_CHECKPOINT_ENV)
    for item in items:
        if "engine" in item.keywords:
            # `pytest -n N --dist loadgroup` (tox -e gpu): one worker per test file and runner
            # variant, so that each group's engines boot once.
            params = item.callspec.params if hasattr(item, "callspec") else {}
            variant = params.get("variant", params.get("engines"))  # a module's engines, when parametrized
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}:{variant or 'all'}"))
        if "gpu" in item.keywords and not cuda:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU with vLLM: run `tox -e gpu` on a GPU machine"))
        if "real_weights" in item.keywords and not real:
            item.add_marker(
                pytest.mark.skip(
                    reason=f"needs the real checkpoint: set {REAL_CHECKPOINT_ENV}=/path/to/higgs-audio-v3-tts-4b"
                )
            )
