"""TalkerOptions and the pure switch helpers."""

import dataclasses
import logging

import pytest

from reference.deploy.switches import (
    SWITCH_NAMES,
    SWITCHES,
    TalkerOptions,
    cudagraph_mode,
    first_chunk_frames,
    resolve_switches,
)

pytestmark = pytest.mark.cpu
V2_ON = TalkerOptions("v2", True, True, True, True, True)


def test_switch_names_and_structure():
    assert SWITCH_NAMES == (
        "device_talker_state",
        "model_sampler",
        "full_decode_cudagraphs",
        "sampler_cudagraphs",
        "window_aligned_first_chunk",
    )
    assert {s.name for s in SWITCHES if s.structural} == {"device_talker_state", "model_sampler"}


def test_options_are_frozen_and_round_trip():
    with pytest.raises(dataclasses.FrozenInstanceError):
        V2_ON.model_sampler = False  # type: ignore[misc]
    assert TalkerOptions.from_dict(V2_ON.to_dict()) == V2_ON
    assert V2_ON.to_dict() == {
        "runner": "v2",
        "device_talker_state": True,
        "model_sampler": True,
        "full_decode_cudagraphs": True,
        "sampler_cudagraphs": True,
        "window_aligned_first_chunk": True,
    }


def test_from_dict_is_exact():
    data = V2_ON.to_dict()
    with pytest.raises(ValueError, match=r"unknown keys \['extra'\]"):
        TalkerOptions.from_dict({**data, "extra": 1})
    data.pop("model_sampler")
    with pytest.raises(ValueError, match=r"missing keys \['model_sampler'\]"):
        TalkerOptions.from_dict(data)


def test_options_validate_types():
    with pytest.raises(ValueError, match="runner"):
        TalkerOptions("v3", True, True, True, True, True)
    with pytest.raises(ValueError, match="model_sampler"):
        TalkerOptions("v2", True, 1, True, True, True)  # type: ignore[arg-type]


def test_resolve_switches_is_pure(caplog):
    caplog.set_level(logging.DEBUG)
    result = resolve_switches({"model_sampler": True}, "v1")
    assert len(result.warnings) == 1
    assert caplog.records == []


def test_resolve_switches_rejects_unknown_and_non_bool():
    with pytest.raises(ValueError, match="unknown feature switches"):
        resolve_switches({"turbo": True}, "v2")
    with pytest.raises(ValueError, match="true, false or null"):
        resolve_switches({"model_sampler": "yes"}, "v2")
    with pytest.raises(ValueError, match="runner"):
        resolve_switches({}, "auto")


def test_explicit_non_structural_switch_keeps_its_origin():
    result = resolve_switches({"full_decode_cudagraphs": False}, "v2", origins={"full_decode_cudagraphs": "p.yaml"})
    assert result.options.full_decode_cudagraphs is False
    assert result.origins["full_decode_cudagraphs"] == "p.yaml"
    assert result.origins["model_sampler"] == "runner default (v2)"


@pytest.mark.parametrize("name", ["full_decode_cudagraphs", "sampler_cudagraphs"])
def test_graph_switches_follow_enforce_eager(name):
    assert getattr(resolve_switches({}, "v2", enforce_eager=False).options, name) is True
    eager = resolve_switches({}, "v2", enforce_eager=True)
    assert getattr(eager.options, name) is False and eager.origins[name] == "enforce_eager: true"
    assert getattr(resolve_switches({name: False}, "v2").options, name) is False
    with pytest.raises(ValueError, match=f"features.{name}: true needs CUDA graphs, but enforce_eager is true"):
        resolve_switches({name: True}, "v2", enforce_eager=True)


def test_cudagraph_mode():
    assert cudagraph_mode(V2_ON, enforce_eager=False) == "FULL_AND_PIECEWISE"
    assert cudagraph_mode(dataclasses.replace(V2_ON, full_decode_cudagraphs=False), False) == "PIECEWISE"
    assert cudagraph_mode(V2_ON, enforce_eager=True) == "NONE"


def test_first_chunk_frames():
    assert first_chunk_frames(V2_ON, 8) == 8
    assert first_chunk_frames(V2_ON, 24) == 24
    assert first_chunk_frames(dataclasses.replace(V2_ON, window_aligned_first_chunk=False), 8) == 1
    with pytest.raises(ValueError, match="whole number of 8-frame"):
        first_chunk_frames(V2_ON, 12)
