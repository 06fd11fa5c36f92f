"""The vLLM compatibility layer, on the installed vLLM (0.32 here; the GPU run exercises 0.26)."""

import pytest
import torch
from vllm import SamplingParams

from reference import compat

pytestmark = pytest.mark.cpu


def test_flat_logprobs_are_available_and_accepted():
    kwargs = compat.flat_logprobs_kwargs(8)
    assert kwargs == {"logprobs": 8, "flat_logprobs": True}
    assert SamplingParams(**kwargs).flat_logprobs is True
    assert "flat_logprobs" in compat.sampling_params_fields()


def test_v1_sampler_output_carries_tokens_and_logprobs():
    tensors = compat.logprobs_tensors(torch.zeros(2, 9, dtype=torch.int32), torch.zeros(2, 9), torch.zeros(2, dtype=torch.int32))
    out = compat.sampler_output(torch.ones(2, 1, dtype=torch.int32), tensors)
    assert out.sampled_token_ids.shape == (2, 1) and out.logprobs_tensors.logprob_token_ids.shape == (2, 9)


def test_v2_sampler_output_has_sampled_and_rejected_counts():
    out = compat.v2_sampler_output(torch.ones(2, 1, dtype=torch.long), None, torch.ones(2, dtype=torch.int32),
                                   torch.zeros(2, dtype=torch.int32))
    assert out.num_sampled.tolist() == [1, 1] and out.num_rejected.tolist() == [0, 0]


def test_runner_kind_tells_the_v1_and_v2_runners_apart():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner as V1Runner
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2Runner

    assert compat.runner_kind(object.__new__(V1Runner)) == "v1"
    assert compat.runner_kind(object.__new__(V2Runner)) == "v2"
    assert compat.runner_kind(object.__new__(type("Sub", (V2Runner,), {}))) == "v2"


def test_the_platform_worker_is_the_cpu_worker_here():
    from vllm.v1.worker.cpu_worker import CPUWorker

    assert compat.platform_worker_base() is CPUWorker


def test_full_cuda_graph_sizes_lists_only_the_full_graphs_of_a_v2_runner():
    from types import SimpleNamespace

    from vllm.config import CUDAGraphMode
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor as Desc

    graphs = {Desc(CUDAGraphMode.FULL, 4, 4): None, Desc(CUDAGraphMode.PIECEWISE, 64, None): None,
              Desc(CUDAGraphMode.FULL, 1, 1): None}
    runner = SimpleNamespace(cudagraph_manager=SimpleNamespace(graphs=graphs))
    assert compat.full_cuda_graph_sizes(runner) == [1, 4]
    assert compat.full_cuda_graph_sizes(SimpleNamespace()) == []  # V1, or eager
