"""Shipped profiles, the schema, the loader helpers, show_config, and vLLM's acceptance of the
engine kwargs."""

import json
from dataclasses import astuple

import pytest
import yaml

from reference.deploy import cli as show_config
from reference.deploy.resolve import (
    PROFILES_DIR,
    display_path,
    load_chain,
    overrides_to_leaves,
    profile_path,
    resolve_deployment,
)
from reference.deploy.platform_matrix import PLATFORMS
from reference.deploy.schema import walk_profile
from reference.codec.geometry import DEFAULT_GEOMETRY, UPSTREAM_V1

pytestmark = pytest.mark.cpu
SHIPPED = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def test_shipped_profiles():
    assert SHIPPED == ["default", "h200_v2", "high_throughput", "low_latency"]


@pytest.mark.parametrize("name", SHIPPED)
def test_profile_starts_with_when_to_use_and_passes_the_schema(name):
    path = PROFILES_DIR / f"{name}.yaml"
    assert path.read_text().startswith("# When to use: ")
    for where, doc in load_chain(name):
        walk_profile(doc, where)  # raises on any schema violation


def test_default_profile_contract():
    d = resolve_deployment("default", "cuda")
    assert d.config["model_runner"] == "prefer-v2" and d.runner == "v2"
    assert d.engine_kwargs["async_scheduling"] is True
    assert d.engine_kwargs["enforce_eager"] is False
    assert max(d.engine_kwargs["compilation_config"]["cudagraph_capture_sizes"]) == 16
    assert d.engine_kwargs["max_num_seqs"] == 16
    assert d.geometry == DEFAULT_GEOMETRY
    assert d.default_sampling_params == {"temperature": 1.0, "top_p": 0.95, "top_k": 50, "seed": 42, "max_tokens": 2048}


@pytest.mark.parametrize("name", ["low_latency", "high_throughput"])
def test_v1_profiles_use_the_upstream_v1_geometry(name):
    for platform in PLATFORMS:
        d = resolve_deployment(name, platform)
        assert (d.runner, d.geometry, d.warnings) == ("v1", UPSTREAM_V1, ())


def test_h200_profile_is_larger_than_default():
    h200, default = resolve_deployment("h200_v2", "cuda"), resolve_deployment("default", "cuda")
    assert h200.config["model_runner"] == "v2"
    assert h200.engine_kwargs["max_num_seqs"] > default.engine_kwargs["max_num_seqs"]
    sizes = h200.engine_kwargs["compilation_config"]["cudagraph_capture_sizes"]
    assert max(sizes) == h200.engine_kwargs["max_num_seqs"]
    assert h200.engine_kwargs["gpu_memory_utilization"] > default.engine_kwargs["gpu_memory_utilization"]


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


def test_overrides_dotted_and_nested_agree():
    dotted = overrides_to_leaves({"codec.chunk_frames": 30, "stages.1.device": "cpu", "features.model_sampler": None})
    nested = overrides_to_leaves(
        {
            "codec": {"chunk_frames": 30},
            "stages": [{"stage_id": 1, "device": "cpu"}],
            "features": {"model_sampler": None},
        }
    )
    assert dotted == nested
    assert dotted[("stages", 1, "device")] == "cpu"


def test_override_null_of_a_plain_key_is_an_error():
    with pytest.raises(ValueError, match="override: max_num_seqs: null cannot be used"):
        overrides_to_leaves({"max_num_seqs": None})


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"max_num_seqs": 0}, "max_num_seqs: must be an integer >= 1, got 0"),
        ({"max_num_seqs": True}, "max_num_seqs: must be an integer >= 1, got True"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization: must be a number in (0, 1], got 1.5"),
        ({"model_runner": "auto"}, "model_runner: must be one of prefer-v2, v2, v1, got 'auto'"),
        ({"codec": {"chunk_frames": -1}}, "codec.chunk_frames: must be an integer >= 0, got -1"),
        ({"codec": {"frames": 1}}, "codec.frames: unknown key; known: first_chunk_frames"),
        ({"features": {"model_sampler": "yes"}}, "features.model_sampler: must be true, false or null, got 'yes'"),
        ({"cudagraph_capture_sizes": []}, "cudagraph_capture_sizes: must be a non-empty list"),
        ({"platforms": {"tpu": {}}}, "platforms.tpu: unknown platform; known: cuda, rocm"),
        ({"platforms": {"cpu": {"base_config": "x.yaml"}}}, "platforms.cpu.base_config: not allowed inside a platform"),
        ({"platforms": {"cpu": {"x-anchor": 1}}}, "platforms.cpu.x-anchor: unknown key"),
        ({"connectors": {"c": {"transport": "tcp"}}}, "connectors.c.transport: must be one of in_process, shared_"),
        ({"stages": {"stage_id": 0}}, "stages: must be a list of"),
        ({"stages": [{"stage_id": 0}, {"stage_id": 0}]}, "stages.0: stage_id listed twice"),
    ],
)
def test_schema_rejects(doc, message):
    with pytest.raises(ValueError) as info:
        walk_profile(doc, "f.yaml")
    assert str(info.value).startswith(f"f.yaml: {message}")


def test_schema_ignores_top_level_x_keys():
    assert walk_profile({"x-anything": {"a": [1]}, "max_num_seqs": 2}, "f.yaml") == ({("max_num_seqs",): 2}, [])


def test_show_config_text(capsys):
    assert show_config.main(["--profile", "default", "--platform", "cpu", "--set", "max_num_seqs=4"]) == 0
    out = capsys.readouterr().out
    lines = {line.split(" = ")[0]: line for line in out.splitlines() if " = " in line}
    assert lines["max_num_seqs"].endswith("# override")
    assert lines["runner"].endswith(
        "# platform matrix: cpu pins V1 (model_runner: prefer-v2 from reference/deploy/profiles/default.yaml)"
    )
    assert lines["enforce_eager"].endswith("# reference/deploy/profiles/default.yaml platforms.cpu")
    assert lines["codec.left_context_frames"].endswith("# platform matrix: cpu pins V1 (V1 geometry)")
    assert lines["options.device_talker_state"].endswith("# runner default (v1)")
    assert 'env.VLLM_USE_V2_MODEL_RUNNER = "0"' in out


def test_show_config_json(capsys):
    assert show_config.main(["--profile", "h200_v2", "--platform", "cuda", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runner"] == "v2" and data["origins"]["max_num_seqs"] == "reference/deploy/profiles/h200_v2.yaml"
    assert list(data["geometry"].values()) == list(astuple(DEFAULT_GEOMETRY))


def test_show_config_error_exit(capsys):
    assert show_config.main(["--profile", "default", "--platform", "cpu", "--set", "model_runner=v2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model_runner: v2 (set by override) is not available on platform 'cpu'")


def test_parse_set_reads_yaml_values():
    assert show_config.parse_set(["a=1", "b=false", "c=cuda:1", "d=[1, 2]", "e="]) == {
        "a": 1,
        "b": False,
        "c": "cuda:1",
        "d": [1, 2],
        "e": None,
    }
    with pytest.raises(ValueError, match="key=value"):
        show_config.parse_set(["novalue"])


@pytest.mark.parametrize("profile, platform", [("default", "cuda"), ("h200_v2", "cuda"), ("low_latency", "cpu")])
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
    from reference.deploy.resolve import load_yaml

    loaded = load_yaml(tmp_path / "f.yaml")
    assert loaded["b"] == loaded["x-a"] and loaded["b"] is not loaded["x-a"]


def test_eager_engine_gets_no_capture_sizes():
    eager = resolve_deployment("default", "cpu").engine_kwargs
    assert eager["enforce_eager"] is True
    assert eager["compilation_config"] == {"cudagraph_mode": "NONE"}
    graphs = resolve_deployment("default", "cuda").engine_kwargs["compilation_config"]
    assert graphs == {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8, 16]}
