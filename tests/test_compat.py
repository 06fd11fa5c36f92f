"""The vLLM compatibility layer, on the installed vLLM (0.32 here; the upgrade gate runs it on
every known version, conformance/tools/gate.py; the GPU run exercises 0.26)."""

import msgspec
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


def test_the_installed_vllm_is_a_known_version():
    assert compat.check_supported_version() == compat.installed_version()
    assert compat.installed_version() in compat.KNOWN_VERSIONS


@pytest.mark.parametrize("version", ["0.28.0", "0.33.0", None])
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
])
def test_sampling_tables_per_version(version, absent, watermarking):
    logprob, neutral = compat.sampling_tables({"logprobs": (None,), "prompt_logprob_start": (None,)},
                                              {"n": (1,), "watermarking": (None,)}, version)
    assert {"watermarking", "prompt_logprob_start"} - set(logprob) - set(neutral) == absent
    assert neutral.get("watermarking") == watermarking
    assert logprob["logprobs"] == (None,) and neutral["n"] == (1,)


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
        block_size=64, attention_backend="CPU_ATTN", seed=5, enforce_eager=True,
    ).create_engine_config()
    built = compat.built_settings(config, SimpleNamespace())
    assert list(built) == list(READBACK_KEYS)
    assert built == {
        "runner": "v1", "compilation_mode": "NONE", "cudagraph_mode": "NONE", "cudagraph_capture_sizes": [],
        "full_cudagraphs": [], "piecewise_cudagraphs": [], "max_num_seqs": 7, "max_model_len": 512,
        "max_num_batched_tokens": 640, "async_scheduling": False, "enable_chunked_prefill": False,
        "enable_prefix_caching": False, "block_size": 64, "attention_backend": "CPU_ATTN",
        "attention_backend_built": None, "kv_cache_dtype": "auto", "enforce_eager": True, "seed": 5,
        "tensor_parallel_size": 1, "data_parallel_size": 1,
    }


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


def test_attention_backends_name_the_classes_of_the_attention_groups():
    from types import SimpleNamespace

    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    group = SimpleNamespace(backend=CPUAttentionBackend)
    assert compat.attention_backends(SimpleNamespace(attn_groups=[[group], [group]])) == ["CPU_ATTN"]
    assert compat.attention_backends(SimpleNamespace()) == []


def test_the_deploy_toolings_compilation_mode_numbers_are_vllms():
    from vllm.config import CompilationMode

    from reference.deploy.readback import COMPILATION_MODES

    assert COMPILATION_MODES == {mode.value: mode.name for mode in CompilationMode}
