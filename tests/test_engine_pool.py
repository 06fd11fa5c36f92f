"""The conformance checks' engine pool on a CPU (conformance/engines.py): eager, engine core and worker in the
test's own process, and vLLM reading its environment again once the engine has started."""

from __future__ import annotations

import os

import pytest

from conformance.environment import has_cuda

pytestmark = [pytest.mark.cpu, pytest.mark.engine, pytest.mark.dummy_weights,
              pytest.mark.skipif(has_cuda(), reason="on CUDA the pool starts engines as vLLM does, one process each")]


def test_a_pool_engine_runs_eager_here_and_leaves_the_environment_as_it_was(monkeypatch):
    from vllm import envs

    from conformance.engines import EnginePool

    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    pool = EnginePool()
    try:
        api = pool.get("v1", {})
        llm = api.engine
        assert llm.collective_rpc(lambda worker: os.getpid()) == [os.getpid()]
        assert llm.llm_engine.vllm_config.model_config.enforce_eager
    finally:
        pool.close()
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    assert envs.VLLM_ENABLE_V1_MULTIPROCESSING  # read from the environment, not from the engine's cache
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    assert not envs.VLLM_ENABLE_V1_MULTIPROCESSING
