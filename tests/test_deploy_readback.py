"""What vLLM must build for a resolved profile, and the comparison with what the workers report
(reference/deploy/readback.py); the engine side runs in conformance/deploy/test_profile_boot.py."""

import json

import pytest

from reference.deploy import cli
from reference.deploy.readback import READBACK_KEYS, BuildMismatch, check_build, expected_build, mismatches
from reference.deploy.resolve import resolve_deployment

pytestmark = pytest.mark.cpu
PROFILE = "reference/deploy/profiles/default.yaml"


def _built_as_expected(expected):
    """A worker report equal to every compared expectation; vLLM's own choices filled with values
    no expectation could hold, so a comparison of an uncompared key would show."""
    return {key: want.value if want.compared else "chosen by vLLM" for key, want in expected.items()}


SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]  # default.yaml's: decode batches up to 16, prompts up to 512


def _build(platform="cpu", overrides=None, engine_args=None):
    deployment = resolve_deployment("default", platform, overrides or {})
    expected = expected_build(deployment, engine_args)
    return deployment, expected, _built_as_expected(expected)


def test_every_key_is_expected_in_print_order():
    _, expected, _ = _build()
    assert list(expected) == list(READBACK_KEYS)


def test_a_build_equal_to_the_profile_passes():
    deployment, expected, built = _build()
    assert mismatches(expected, [built], "here") == []
    check_build(deployment, [built])


def test_a_mismatch_names_the_key_the_profile_and_both_values():
    deployment, _, built = _build()
    built["max_num_seqs"] = 4
    with pytest.raises(BuildMismatch) as error:
        check_build(deployment, [built])
    assert str(error.value) == f"{PROFILE} on cpu: max_num_seqs: vLLM built 4, the profile resolved 16 ({PROFILE})"


def test_every_mismatching_key_is_named_once():
    deployment, expected, built = _build(overrides={"stages.0.enable_prefix_caching": False})
    built.update(enable_prefix_caching=True, attention_backend="TRITON_ATTN", seed=1)
    problems = mismatches(expected, [built], f"{PROFILE} on cpu")
    keys = [p.split(": ")[1] for p in problems]
    assert keys == ["enable_prefix_caching", "attention_backend", "seed"]
    assert problems[0].endswith("enable_prefix_caching: vLLM built True, the profile resolved False (override)")
    assert "vLLM built 'TRITON_ATTN', the profile resolved None (the launcher" in problems[1]


def test_each_worker_is_compared_and_named_when_there_are_several():
    deployment, expected, built = _build()
    other = {**built, "attention_backend_built": "TORCH_SDPA"}
    problems = mismatches(expected, [built, other], "p")
    assert problems == [
        "p: attention_backend_built: vLLM built 'TORCH_SDPA' (worker 1), "
        "the profile resolved 'CPU_ATTN' (platform cpu: its only backend)"
    ]


def test_a_key_the_worker_does_not_report_is_a_mismatch():
    _, expected, built = _build()
    del built["block_size"]  # even a key left to vLLM: the worker must report every key
    assert mismatches(expected, [built], "p") == ["p: block_size: vLLM reported no value; the worker lacks this key"]


def test_no_worker_report_is_a_mismatch():
    deployment, _, _ = _build()
    with pytest.raises(BuildMismatch, match="no worker reported"):
        check_build(deployment, [])


def test_keys_the_profile_leaves_to_vllm_are_printed_not_compared():
    _, expected, built = _build("cuda")
    for key in ("block_size", "enable_chunked_prefill", "max_num_batched_tokens", "kv_cache_dtype",
                "compilation_mode", "attention_backend_built", "tensor_parallel_size"):
        assert not expected[key].compared and expected[key].origin == "vLLM default", key
    assert mismatches(expected, [built], "p") == []


def test_the_shipped_profiles_ask_for_prefix_caching_and_it_is_compared():
    _, expected, _ = _build("cuda")
    prefix = expected["enable_prefix_caching"]
    assert (prefix.value, prefix.compared, prefix.origin) == (True, True, "reference/deploy/profiles/default.yaml")


def test_keys_the_profile_sets_are_compared():
    overrides = {f"stages.0.{k}": v for k, v in {
        "max_num_batched_tokens": 512, "enable_chunked_prefill": False, "enable_prefix_caching": False,
        "block_size": 64, "kv_cache_dtype": "fp8", "tensor_parallel_size": 2, "data_parallel_size": 2,
        "attention_backend": "flex_attention", "seed": 7,
    }.items()}
    _, expected, _ = _build("cuda", overrides)
    values = {k: e.value for k, e in expected.items() if e.compared}
    assert values == {
        "runner": "v2", "cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": SIZES,
        "full_cudagraphs": [1, 2, 4, 8, 16], "piecewise_cudagraphs": SIZES, "sampler_cudagraphs": True,
        "max_num_seqs": 16, "max_model_len": 4096, "max_num_batched_tokens": 512, "async_scheduling": True,
        "enable_chunked_prefill": False, "enable_prefix_caching": False, "block_size": 64,
        "attention_backend": "FLEX_ATTENTION", "attention_backend_built": "FLEX_ATTENTION", "kv_cache_dtype": "fp8",
        "enforce_eager": False, "seed": 7, "tensor_parallel_size": 2, "data_parallel_size": 2,
    }


def test_full_graphs_asked_but_piecewise_built_is_caught():
    _, expected, built = _build("cuda")
    built.update(cudagraph_mode="PIECEWISE", full_cudagraphs=[])
    problems = mismatches(expected, [built], f"{PROFILE} on cuda")
    assert [p.split(": ")[1] for p in problems] == ["cudagraph_mode", "full_cudagraphs"]
    assert "vLLM built 'PIECEWISE', the profile resolved 'FULL_AND_PIECEWISE' (features.full_decode_cudagraphs: true" \
        in problems[0]
    assert "full_cudagraphs: vLLM built [], the profile resolved [1, 2, 4, 8, 16] (cudagraph_mode FULL_AND_PIECEWISE" \
        in problems[1]


def test_full_graphs_are_expected_only_for_decode_batches_a_batch_can_reach():
    _, expected, _ = _build("cuda", {"stages.0.max_num_seqs": 4})
    assert expected["full_cudagraphs"].value == [1, 2, 4]
    assert expected["piecewise_cudagraphs"].value == SIZES


def test_full_decode_graphs_off_expects_no_full_graphs():
    _, expected, _ = _build("cuda", {"features.full_decode_cudagraphs": False})
    assert expected["cudagraph_mode"].value == "PIECEWISE"
    assert expected["full_cudagraphs"].value == [] and expected["piecewise_cudagraphs"].value == SIZES


def test_the_sampler_graphs_follow_their_switch_and_a_sampler_left_eager_is_caught():
    _, expected, built = _build("cuda")
    assert expected["sampler_cudagraphs"].value is True
    assert expected["sampler_cudagraphs"].origin == "features.sampler_cudagraphs: true (runner default (v2))"
    built["sampler_cudagraphs"] = False
    assert mismatches(expected, [built], "p") == [
        "p: sampler_cudagraphs: vLLM built False, the profile resolved True "
        "(features.sampler_cudagraphs: true (runner default (v2)))"]
    _, off, _ = _build("cuda", {"features.sampler_cudagraphs": False})
    assert off["sampler_cudagraphs"].value is False


def test_eager_expects_no_compilation_and_no_graphs():
    _, expected, _ = _build("cpu")
    for key in ("compilation_mode", "cudagraph_mode"):
        assert expected[key].value == "NONE" and expected[key].origin.startswith("enforce_eager: true ("), key
    assert expected["sampler_cudagraphs"].value is False and expected["sampler_cudagraphs"].compared
    for key in ("cudagraph_capture_sizes", "full_cudagraphs", "piecewise_cudagraphs"):
        assert expected[key].value == [] and expected[key].compared, key


def test_launch_overrides_win_and_say_so():
    _, expected, _ = _build("cuda", engine_args={"attention_backend": "FLEX_ATTENTION", "max_num_seqs": 2})
    for key, value in (("attention_backend", "FLEX_ATTENTION"), ("attention_backend_built", "FLEX_ATTENTION"),
                       ("max_num_seqs", 2)):
        assert (expected[key].value, expected[key].origin) == (value, "launch override"), key
    assert expected["full_cudagraphs"].value == [1, 2]


def test_the_cli_prints_the_keys_it_will_compare(capsys):
    assert cli.main(["default", "--platform", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    build = [ln for ln in lines if ln.startswith("build.")]
    assert [ln.split(" = ")[0] for ln in build] == [f"build.{k}" for k in READBACK_KEYS]
    assert any(ln.startswith("build.max_num_seqs = 16 ") and ln.endswith(f"# {PROFILE}") for ln in build)
    assert "build.block_size = (vLLM default, not compared)" in build
    assert cli.main(["default", "--platform", "cpu", "--json"]) == 0
    build_json = json.loads(capsys.readouterr().out)["build"]
    assert list(build_json) == list(READBACK_KEYS)
    assert build_json["attention_backend_built"] == {"value": "CPU_ATTN", "origin": "platform cpu: its only backend",
                                                     "compared": True}


def test_the_talker_dtype_is_compared_where_the_profile_names_one():
    """default.yaml names float32 on the CPU (the suite's dtype): a bfloat16 build is refused there;
    on CUDA no profile names one, so vLLM's "auto" choice is printed, not compared."""
    deployment, expected, built = _build("cpu")
    assert (expected["dtype"].value, expected["dtype"].compared) == ("float32", True)
    built["dtype"] = "bfloat16"
    with pytest.raises(BuildMismatch, match=r"dtype: vLLM built 'bfloat16', the profile resolved 'float32'"):
        check_build(deployment, [built])
    _, cuda, _ = _build("cuda")
    assert not cuda["dtype"].compared
    _, half, _ = _build("cpu", {"stages.0.dtype": "half"})
    assert (half["dtype"].value, half["dtype"].compared) == ("float16", True)
    _, auto, _ = _build("cpu", {"stages.0.dtype": "auto"})
    assert not auto["dtype"].compared


def test_stream_interval_is_compared_where_the_profile_sets_it():
    _, unset, _ = _build("cuda")
    assert not unset["stream_interval"].compared
    deployment, expected, built = _build("cuda", {"stages.0.stream_interval": 4})
    assert (expected["stream_interval"].value, expected["stream_interval"].compared) == (4, True)
    built["stream_interval"] = 1
    with pytest.raises(BuildMismatch, match="stream_interval: vLLM built 1, the profile resolved 4"):
        check_build(deployment, [built])
