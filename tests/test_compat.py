"""The vLLM compatibility layer, on the installed vLLM, on every platform: the CPU job and the GPU
selection (marker `every_platform`) both run it, so the upgrade gate checks every `Difference` on each
known version (conformance/gate/__main__.py). The CPU platform's own facts: test_compat_cpu.py."""

import msgspec
import pytest
import torch
from vllm import SamplingParams

from reference import compat

pytestmark = [pytest.mark.cpu, pytest.mark.every_platform]


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


def test_full_cuda_graph_sizes_lists_only_the_full_graphs_of_a_v2_runner():
    from types import SimpleNamespace

    from vllm.config import CUDAGraphMode
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor as Desc

    graphs = {Desc(CUDAGraphMode.FULL, 4, 4): None, Desc(CUDAGraphMode.PIECEWISE, 64, None): None,
              Desc(CUDAGraphMode.FULL, 1, 1): None}
    runner = SimpleNamespace(cudagraph_manager=SimpleNamespace(graphs=graphs))
    assert compat.full_cuda_graph_sizes(runner) == [1, 4]
    assert compat.full_cuda_graph_sizes(SimpleNamespace()) == []  # V1, or eager


def test_the_installed_vllm_is_a_known_version():
    assert compat.check_supported_version() == compat.installed_version()
    assert compat.installed_version() in compat.KNOWN_VERSIONS


@pytest.mark.parametrize("version", ["0.28.0", "0.34.0", None])
def test_an_unknown_version_fails_early_naming_it_and_the_known_ones(version, monkeypatch):
    if version is None:  # no vLLM installed at all
        monkeypatch.setattr(compat, "installed_version", lambda: None)
    with pytest.raises(compat.UnsupportedVLLMVersion) as error:
        compat.check_supported_version(version)
    assert f"vLLM {version or '(not installed)'} is not a version this suite knows" in str(error.value)
    assert "0.26.0 (cuda)" in str(error.value) and "0.32.0 (cpu)" in str(error.value)


def test_a_local_version_suffix_is_the_same_release():
    assert compat.check_supported_version("0.32.0+cpu") == "0.32.0"


def test_every_difference_names_known_versions_only():
    for difference in compat.DIFFERENCES:
        assert difference.versions and difference.versions <= set(compat.KNOWN_VERSIONS), difference.name


def _sampling_default(name):
    field = {f.name: f for f in msgspec.structs.fields(SamplingParams)}.get(name)
    if field is None:
        return "absent"
    return field.default_factory() if field.default is msgspec.NODEFAULT else field.default


# The installed vLLM shows a difference exactly when the table says it applies to its version: a
# missing entry (or one naming the wrong versions) fails here on the version that shows it.
@pytest.mark.parametrize("difference", compat.MISSING_SAMPLING_FIELDS, ids=lambda d: d.name)
def test_missing_sampling_fields_hold_exactly_where_they_apply(difference):
    missing = [f for f in difference.fields if f not in compat.sampling_params_fields()]
    expected = list(difference.fields) if difference.applies() else []
    assert missing == expected, f"vLLM {compat.installed_version()}: SamplingParams lacks {missing}"


def test_watermarking_default_true_holds_exactly_where_it_applies():
    default = _sampling_default("watermarking")
    assert (default is True) == compat.WATERMARKING_DEFAULT_TRUE.applies(), (
        f"vLLM {compat.installed_version()}: SamplingParams.watermarking defaults to {default!r}")


@pytest.mark.parametrize("version, absent, watermarking", [
    pytest.param("0.26.0", {"watermarking", "prompt_logprob_start"}, None, id="0.26.0"),
    pytest.param("0.29.0", {"watermarking", "prompt_logprob_start"}, None, id="0.29.0"),
    pytest.param("0.30.0", {"prompt_logprob_start"}, (None, True), id="0.30.0"),
    pytest.param("0.31.0", set(), (None, True), id="0.31.0"),
    pytest.param("0.32.0", set(), (None,), id="0.32.0"),
    pytest.param("0.33.0", set(), (None,), id="0.33.0"),
])
def test_sampling_tables_per_version(version, absent, watermarking):
    logprob, neutral = compat.sampling_tables({"logprobs": (None,), "prompt_logprob_start": (None,)},
                                              {"n": (1,), "watermarking": (None,)}, version)
    assert {"watermarking", "prompt_logprob_start"} - set(logprob) - set(neutral) == absent
    assert neutral.get("watermarking") == watermarking
    assert logprob["logprobs"] == (None,) and neutral["n"] == (1,)


def test_cuda_graph_sizes_of_a_v2_runner_count_piecewise_graphs_once_captured():
    from types import SimpleNamespace

    from vllm.config import CUDAGraphMode
    from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor as Desc

    full = {Desc(CUDAGraphMode.FULL, 2, 2): None, Desc(CUDAGraphMode.FULL, 1, 1): None}
    plan = {CUDAGraphMode.PIECEWISE: [Desc(CUDAGraphMode.PIECEWISE, n, None) for n in (16, 8, 1)],
            CUDAGraphMode.FULL: [Desc(CUDAGraphMode.FULL, n, n) for n in (4, 2, 1)]}
    manager = SimpleNamespace(graphs=full, _capture_descs=plan, _graphs_captured=True)
    runner = SimpleNamespace(cudagraph_manager=manager)
    assert compat.cuda_graph_sizes(runner) == {"FULL": [1, 2], "PIECEWISE": [1, 8, 16]}  # FULL: the graphs held
    manager._graphs_captured = False
    assert compat.cuda_graph_sizes(runner) == {"FULL": [1, 2], "PIECEWISE": []}


def test_cuda_graph_sizes_of_a_v1_runner_are_its_dispatcher_capture_batches():
    from types import SimpleNamespace

    from vllm.config import CUDAGraphMode
    from vllm.forward_context import BatchDescriptor

    descs = [(CUDAGraphMode.PIECEWISE, [BatchDescriptor(num_tokens=8), BatchDescriptor(num_tokens=4)]),
             (CUDAGraphMode.FULL, [BatchDescriptor(num_tokens=2, uniform=True)])]
    runner = SimpleNamespace(cudagraph_dispatcher=SimpleNamespace(get_capture_descs=lambda: descs))
    assert compat.cuda_graph_sizes(runner) == {"FULL": [2], "PIECEWISE": [4, 8]}
    assert compat.cuda_graph_sizes(SimpleNamespace()) == {"FULL": [], "PIECEWISE": []}


def test_the_deploy_toolings_compilation_mode_numbers_are_vllms():
    from vllm.config import CompilationMode

    from reference.deploy.readback import COMPILATION_MODES

    assert COMPILATION_MODES == {mode.value: mode.name for mode in CompilationMode}
