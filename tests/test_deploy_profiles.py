"""Shipped profiles, the deploy-file schema, the loader helpers, the CLI, the stream check, and
vLLM's acceptance of the engine kwargs."""

import json
from dataclasses import astuple

import pytest
import yaml
from jsonschema import Draft202012Validator

from conformance.case_files import load
from higgs_dummy.checkpoint import DTYPES, TEXT_CONFIGS
from reference.codec.geometry import DEFAULT_GEOMETRY, UPSTREAM_V1, UPSTREAM_V2, StreamGeometry
from reference.deploy import cli
from reference.deploy.platform_matrix import PLATFORMS
from reference.deploy.resolve import (
    PROFILES_DIR,
    display_path,
    load_chain,
    load_yaml,
    overrides_to_leaves,
    profile_path,
    resolve_deployment,
)
from reference.deploy.schema import DeployFileError, schema, validate_file
from reference.deploy.stream_check import check_stream, measured_geometries

pytestmark = pytest.mark.cpu
SHIPPED = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
# A prompt prefills in a piecewise CUDA graph up to this many tokens (a 10 s voice's prompt is 257
# slots and its text): beyond the captured sizes vLLM runs the prefill without graphs, which on the
# H200 took 32-53 ms of host launches for the benchmark's 91-token prompt
# (benchmarks/results/2026-12-01-h200-split/NOTES.md).
PROMPT_GRAPH_TOKENS = 512


def decode_reach(engine_kwargs: dict) -> int:
    """The largest capture size a decode batch reaches (<= max_num_seqs): its FULL graphs' reach."""
    sizes = engine_kwargs["compilation_config"]["cudagraph_capture_sizes"]
    return max(s for s in sizes if s <= engine_kwargs["max_num_seqs"])


def test_shipped_profiles():
    assert SHIPPED == ["default", "h200_v2", "high_throughput", "high_throughput_v2", "low_latency", "low_latency_v2",
                       "many_streams_v2"]


def test_schema_is_valid_draft_2020_12():
    Draft202012Validator.check_schema(schema())


@pytest.mark.parametrize("name", SHIPPED)
def test_profile_starts_with_when_to_use_and_passes_the_schema(name):
    path = PROFILES_DIR / f"{name}.yaml"
    assert path.read_text().startswith("# When to use: ")
    for where, doc in load_chain(name):
        validate_file(doc, where)


def test_default_profile_contract():
    d = resolve_deployment("default", "cuda")
    assert d.config["model_runner"] == "prefer-v2" and d.runner == "v2"
    assert d.engine_kwargs["async_scheduling"] is True
    assert d.engine_kwargs["enforce_eager"] is False
    assert decode_reach(d.engine_kwargs) == 16
    assert (d.engine_kwargs["max_num_seqs"], d.engine_kwargs["max_model_len"]) == (16, 4096)
    assert d.geometry == DEFAULT_GEOMETRY and d.geometry_connector == "talker_to_code2wav"
    assert d.default_sampling_params == {"temperature": 1.0, "top_p": 0.95, "top_k": 50, "seed": 42, "max_tokens": 2048}
    assert d.codec_stage["max_num_seqs"] == 16
    assert d.connectors["talker_to_code2wav"]["extra"]["max_inflight_chunks"] == 4


@pytest.mark.parametrize("platform", list(PLATFORMS))
def test_default_never_asks_for_flashinfer(platform):
    # The CPU engine cannot run FLASHINFER; upstream's Higgs files ask for it on CUDA.
    d = resolve_deployment("default", platform)
    assert all(stage.get("attention_backend") is None for stage in d.stages)


def test_engine_kwargs_are_stage_0_without_reserved_keys():
    d = resolve_deployment("default", "cpu")
    assert set(d.engine_kwargs) == {
        "async_scheduling", "enforce_eager", "compilation_config", "max_num_seqs", "max_model_len",
        "gpu_memory_utilization", "enable_prefix_caching", "hf_overrides", "dtype",
    }
    assert d.codec_stage == {
        "stage_id": 1, "devices": "0", "max_num_seqs": 4, "input_connectors": {"from_stage_0": "talker_to_code2wav"}
    }


@pytest.mark.parametrize("name", ["low_latency", "high_throughput"])
def test_v1_profiles_use_the_upstream_v1_geometry(name):
    for platform in PLATFORMS:
        d = resolve_deployment(name, platform)
        assert (d.runner, d.geometry, d.warnings) == ("v1", UPSTREAM_V1, ())


def test_h200_profile_is_larger_than_default():
    h200, default = resolve_deployment("h200_v2", "cuda"), resolve_deployment("default", "cuda")
    assert h200.config["model_runner"] == "v2"
    assert h200.engine_kwargs["max_num_seqs"] > default.engine_kwargs["max_num_seqs"]
    assert decode_reach(h200.engine_kwargs) == h200.engine_kwargs["max_num_seqs"] == h200.codec_stage["max_num_seqs"]
    assert h200.engine_kwargs["gpu_memory_utilization"] > default.engine_kwargs["gpu_memory_utilization"]


def test_low_latency_v2_streams_its_first_frame_after_18_talker_steps_and_stitches_exactly():
    d = resolve_deployment("low_latency_v2", "cuda")
    assert (d.runner, astuple(d.geometry)) == ("v2", (1, 25, 10, 10, True))
    assert d.options.window_aligned_first_chunk is False  # the switch's off position: a 1-frame first chunk
    assert d.origins["options.window_aligned_first_chunk"] == "reference/deploy/profiles/low_latency_v2.yaml"
    delay_rows = 7  # frame t needs delay-pattern rows t .. t + 7
    assert d.geometry.first_chunk_frames + d.geometry.right_holdback_frames + delay_rows == 18
    assert check_stream(d.geometry).exact and check_stream(d.geometry).measured.case_id == "low_latency_v2"
    with pytest.raises(ValueError, match="1 frames is not a whole number of 8-frame codec windows"):
        resolve_deployment("low_latency_v2", "cuda", {"features.window_aligned_first_chunk": True})


def test_high_throughput_v2_graphs_sequences_and_codec_batch_go_to_64():
    d = resolve_deployment("high_throughput_v2", "cuda")
    assert (d.runner, d.engine_kwargs["enforce_eager"], d.geometry) == ("v2", False, DEFAULT_GEOMETRY)
    assert d.engine_kwargs["compilation_config"]["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert decode_reach(d.engine_kwargs) == d.engine_kwargs["max_num_seqs"] == d.codec_stage["max_num_seqs"] == 64


def test_many_streams_v2_takes_256_streams_and_holds_their_kv_cache():
    d = resolve_deployment("many_streams_v2", "cuda")
    assert (d.runner, d.engine_kwargs["enforce_eager"], d.geometry) == ("v2", False, DEFAULT_GEOMETRY)
    assert decode_reach(d.engine_kwargs) == d.engine_kwargs["max_num_seqs"] == d.codec_stage["max_num_seqs"] == 256
    assert d.config["serving"]["max_waiting_requests"] == 256
    # The 4b talker's KV bytes per token, from the dummy writer's copy of the real geometry.
    text, dtype = TEXT_CONFIGS["4b"], DTYPES["4b"]
    per_token = text["num_hidden_layers"] * text["num_key_value_heads"] * text["head_dim"] * 2 * dtype.itemsize
    rows = 10 * 25 + 7  # 10 s of frames and the delay pattern's 7 rows
    per_stream = 768  # the decode rows and a prompt of up to 511: a 10 s voice clone's 257 slots and its texts
    assert rows + 257 < per_stream
    assert d.engine_kwargs["kv_cache_memory_bytes"] == 256 * per_stream * per_token


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_v2_geometry_stitches_exactly(name):
    # V1 keeps upstream's geometry on purpose (holdback 4); a V2 profile we ship must equal the offline decode.
    d = resolve_deployment(name, "cuda")
    if d.runner == "v2":
        assert check_stream(d.geometry).exact, check_stream(d.geometry).summary()


def test_resolved_deployment_is_frozen():
    d = resolve_deployment("default", "cuda")
    with pytest.raises(AttributeError):
        d.runner = "v1"  # type: ignore[misc]


def test_profile_path():
    assert profile_path("default") == PROFILES_DIR / "default.yaml"
    assert profile_path("default.yaml") == PROFILES_DIR / "default.yaml"
    assert profile_path("some/dir/p.yaml").as_posix() == "some/dir/p.yaml"
    with pytest.raises(ValueError, match="unknown profile 'nope'; known profiles: default, h200_v2"):
        profile_path("nope")


def test_display_path(tmp_path):
    assert display_path(PROFILES_DIR / "default.yaml") == "reference/deploy/profiles/default.yaml"
    assert display_path(tmp_path / "p.yaml") == str(tmp_path / "p.yaml")
    root = tmp_path / "upstream"
    (root / "vllm_omni-0.30.0.dist-info").mkdir(parents=True)
    assert display_path(root / "vllm_omni" / "deploy" / "x.yaml") == "vllm_omni/deploy/x.yaml"


def test_overrides_dotted_and_nested_agree():
    dotted = overrides_to_leaves(
        {"connectors.c.extra.codec_chunk_frames": 30, "stages.1.devices": "1", "features.model_sampler": None}
    )
    nested = overrides_to_leaves(
        {
            "connectors": {"c": {"extra": {"codec_chunk_frames": 30}}},
            "stages": [{"stage_id": 1, "devices": "1"}],
            "features": {"model_sampler": None},
        }
    )
    assert dotted == nested
    assert dotted[("stages", 1, "devices")] == "1"


def test_override_is_checked_against_the_schema():
    with pytest.raises(DeployFileError, match="override: stages.0.max_num_seqs: must be integer, got NoneType None"):
        overrides_to_leaves({"stages.0.max_num_seqs": None})


@pytest.mark.parametrize(
    "doc, message",
    [
        ([1], "a deploy file must be a mapping, got list"),
        ({"stages": [{"stage_id": 0, "max_num_seqs": 0}]}, "stages.0.max_num_seqs: 0 is less than the minimum of 1"),
        ({"stages": [{"stage_id": 0, "max_num_seqs": True}]}, "stages.0.max_num_seqs: must be integer, got bool True"),
        ({"stages": [{"stage_id": 0, "gpu_memory_utilization": 1.5}]}, "stages.0.gpu_memory_utilization: 1.5 is greater"),
        ({"model_runner": "auto"}, "model_runner: must be one of prefer-v2, v2, v1, got 'auto'"),
        ({"connectors": {"c": {"extra": {"codec_chunk_frames": 0}}}}, "connectors.c.extra.codec_chunk_frames: 0 is less"),
        ({"connectors": {"c": {"extra": {"codec_growing_chunks": 1}}}},
         "connectors.c.extra.codec_growing_chunks: must be boolean, got int 1"),
        ({"connectors": {"c": {"transport": "tcp"}}}, "connectors.c.transport: unknown key; known: extra, name"),
        ({"features": {"model_sampler": "yes"}}, "features.model_sampler: must be boolean or null, got str 'yes'"),
        ({"features": {"turbo": True}}, "features.turbo: unknown key; known: device_talker_state, full_decode_cudagraphs"),
        ({"platforms": {"tpu": {}}}, "platforms.tpu: unknown name; known: cuda, rocm, npu, xpu, musa, cpu"),
        ({"platforms": {"cpu": {"base_config": "x.yaml"}}}, "platforms.cpu.base_config: unknown key; known: connectors"),
        ({"platforms": {"cpu": {"x-anchor": 1}}}, "platforms.cpu.x-anchor: unknown key"),
        ({"stages": {"stage_id": 0}}, "stages: must be array or null, got dict"),
        ({"stages": [{"stage_id": 0, "MaxSeqs": 1}]}, "stages.0.MaxSeqs: unknown key"),
        ({"stages": [{"stage_id": 0}, {"stage_id": 0}]}, "stages.0: stage_id listed twice"),
        ({"forced_aligner": {}}, "forced_aligner: unknown key (the keys: reference/deploy/schema.json)"),
    ],
)
def test_schema_rejects(doc, message):
    with pytest.raises(DeployFileError) as info:
        validate_file(doc, "f.yaml")
    assert str(info.value).startswith(f"f.yaml: {message}")


def test_schema_ignores_top_level_x_keys():
    validate_file({"x-anything": {"a": [1]}, "stages": [{"stage_id": 0}]}, "f.yaml")


def _lines(out):
    return {line.split(" = ")[0]: line for line in out.splitlines() if " = " in line}


def test_cli_text(capsys):
    assert cli.main(["default", "--platform", "cpu", "--set", "stages.0.max_num_seqs=4"]) == 0
    out = capsys.readouterr().out
    lines = _lines(out)
    assert lines["stages.0.max_num_seqs"].endswith("# override")
    assert lines["runner"].endswith(
        "# platform matrix: cpu pins V1 (model_runner: prefer-v2 from reference/deploy/profiles/default.yaml)"
    )
    assert lines["stages.0.enforce_eager"].endswith("# reference/deploy/profiles/default.yaml platforms.cpu")
    left = "connectors.talker_to_code2wav.extra.codec_left_context_frames"
    assert lines[left].endswith("# platform matrix: cpu pins V1 (V1 geometry)")
    assert lines["options.device_talker_state"].endswith("# runner default (v1)")
    assert lines["stages.0.compilation_config.cudagraph_capture_sizes"].endswith(
        "# reference/deploy/profiles/default.yaml"
    )
    assert 'env.VLLM_USE_V2_MODEL_RUNNER = "0"' in out
    assert "stream: geometry 1/25/25/4" in out and "holdback 6 short" in out and "streaming.yaml: upstream_v1" in out
    assert "runner by platform: cuda v2, rocm v1, npu v1, xpu v1, musa v1, cpu v1" in out


def test_cli_json(capsys):
    assert cli.main(["h200_v2", "--platform", "cuda", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runner"] == "v2" and data["origins"]["stages.0.max_num_seqs"] == "reference/deploy/profiles/h200_v2.yaml"
    assert list(data["geometry"].values()) == list(astuple(DEFAULT_GEOMETRY))
    assert data["stream_equals_offline"] is True and data["measured"]["case_id"] == "default"
    assert data["runner_by_platform"]["cpu"] == "error: RunnerUnavailable"


def test_cli_error_exit(capsys):
    assert cli.main(["default", "--platform", "cpu", "--set", "model_runner=v2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model_runner: v2 (set by override) is not available on platform 'cpu'")


def test_cli_file_path(tmp_path, capsys):
    (tmp_path / "p.yaml").write_text("stages: [{stage_id: 0, max_num_seqs: 2}]\nsurprise: 1\n")
    assert cli.main([str(tmp_path / "p.yaml")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path}/p.yaml: surprise: unknown key (the keys: reference/deploy/schema.json)\n"


def test_parse_set_reads_yaml_values():
    assert cli.parse_set(["a=1", "b=false", "c=cuda:1", "d=[1, 2]", "e="]) == {
        "a": 1,
        "b": False,
        "c": "cuda:1",
        "d": [1, 2],
        "e": None,
    }
    with pytest.raises(ValueError, match="key=value"):
        cli.parse_set(["novalue"])


@pytest.mark.parametrize("profile, platform", [("default", "cuda"), ("h200_v2", "cuda"), ("many_streams_v2", "cuda"),
                                               ("low_latency", "cpu")])
def test_vllm_accepts_the_engine_kwargs(profile, platform):
    from vllm.config import CompilationConfig
    from vllm.engine.arg_utils import EngineArgs

    kwargs = resolve_deployment(profile, platform).engine_kwargs
    args = EngineArgs(model="unused", **kwargs)
    assert args.max_num_seqs == kwargs["max_num_seqs"]
    compilation = CompilationConfig(**kwargs["compilation_config"])
    assert compilation.cudagraph_mode.name == kwargs["compilation_config"]["cudagraph_mode"]


def test_yaml_safe_load_shares_anchors_which_the_loader_undoes(tmp_path):
    text = "x-a: &a [1]\nb: *a\n"
    raw = yaml.safe_load(text)
    assert raw["b"] is raw["x-a"]  # the hazard the loader exists to remove
    (tmp_path / "f.yaml").write_text(text)
    loaded = load_yaml(tmp_path / "f.yaml")
    assert loaded["b"] == loaded["x-a"] and loaded["b"] is not loaded["x-a"]


def test_eager_engine_gets_no_capture_sizes():
    eager = resolve_deployment("default", "cpu").engine_kwargs
    assert eager["enforce_eager"] is True
    assert eager["compilation_config"] == {"cudagraph_mode": "NONE"}
    graphs = resolve_deployment("default", "cuda").engine_kwargs["compilation_config"]
    assert graphs == {"cudagraph_mode": "FULL_AND_PIECEWISE",
                      "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]}


@pytest.mark.parametrize("name", SHIPPED)
def test_every_v2_profile_graphs_its_decode_batches_and_its_prompts(name):
    d = resolve_deployment(name, "cuda")
    if d.runner != "v2" or d.engine_kwargs["enforce_eager"]:
        pytest.skip(f"{name} runs {d.runner}{', eager' if d.engine_kwargs['enforce_eager'] else ''} on cuda")
    sizes = d.engine_kwargs["compilation_config"]["cudagraph_capture_sizes"]
    assert decode_reach(d.engine_kwargs) == d.engine_kwargs["max_num_seqs"], "every decode batch in a graph"
    assert max(sizes) == PROMPT_GRAPH_TOKENS, "prompts up to PROMPT_GRAPH_TOKENS prefill in a graph"
    assert sizes == sorted(set(sizes))


@pytest.mark.parametrize("name", SHIPPED)
def test_on_cuda_every_profiles_codec_batch_takes_a_window_of_each_talker_sequence(name):
    # A talker step hands the stage up to one window per sequence; a smaller codec batch decodes them
    # in several rounds (H200, 2026-12-01, 64 streams: first PCM 162-2,524 ms per round with a codec
    # batch of 16, 30-1,053 ms with 64; benchmarks/results/2026-12-01-h200-codec-graphs-a/NOTES.md).
    d = resolve_deployment(name, "cuda")
    assert d.codec_stage["max_num_seqs"] >= d.engine_kwargs["max_num_seqs"]


def test_stream_check():
    assert check_stream(DEFAULT_GEOMETRY).exact
    v1 = check_stream(UPSTREAM_V1)
    assert (v1.exact, v1.left_short, v1.right_short) == (False, 0, 6)
    assert (check_stream(UPSTREAM_V2).left_short, check_stream(UPSTREAM_V2).right_short) == (2, 10)
    assert check_stream(StreamGeometry(8, 25, 10, 11)).measured is None
    assert check_stream(DEFAULT_GEOMETRY).measured.case_id == "default"


def test_measured_geometries_are_the_codec_cases():
    cases = load("codec/streaming")["geometries"]
    read = measured_geometries()
    assert {m.case_id for m in read.values()} == {c["id"] for c in cases}
    for case in cases:
        measured = read[StreamGeometry(**case["geometry"])]
        assert measured.case_id == case["id"]
        assert measured.snr_db == {k: v["snr_db"] for k, v in case.get("measured", {}).items()}
        assert (measured.bound_snr_db is not None) == (case["expect"] == "meets_bound")
    exact = check_stream(DEFAULT_GEOMETRY).summary()
    assert "held to SNR >= 100.0 dB" in exact and "measured" not in exact  # its noise is no figure
    assert "measured 23.5373 dB" in check_stream(UPSTREAM_V1).summary()


def test_stage_device_reads_the_resolved_stage():
    from reference.talker.engine import stage_device

    cuda = resolve_deployment("default", "cuda", {"stages.1.devices": "1,2"})
    assert stage_device(cuda, cuda.codec_stage) == "cuda:1"
    assert stage_device(cuda, None) == "cuda:0"
    cpu = resolve_deployment("default", "cpu")
    assert stage_device(cpu, cpu.codec_stage) == "cpu"
    with pytest.raises(ValueError, match="stages.1.devices: 'x' is not a device id"):
        stage_device(cuda, {"stage_id": 1, "devices": "x"})


def test_a_serving_setting_the_profile_lacks_is_refused_naming_it_and_its_use():
    from dataclasses import replace

    from reference.serve.admission import ServingLimits
    from reference.serve.stop import Stop

    deployment = resolve_deployment("default", "cpu", {})
    assert deployment.serving_setting("keep_alive_s", "unused") == 75
    lacking = replace(deployment, config={**deployment.config, "serving": {}})
    with pytest.raises(ValueError, match=r"serving\.keep_alive_s is not set: it keeps idle connections \(reference/"):
        lacking.serving_setting("keep_alive_s", "it keeps idle connections")
    with pytest.raises(ValueError, match=r"serving\.drain_timeout_s is not set: the speech server lets its streams"):
        Stop.from_deployment(lacking)
    with pytest.raises(ValueError, match=r"serving\.max_waiting_requests is not set: the speech server bounds its queue"):
        ServingLimits.from_deployment(lacking)
