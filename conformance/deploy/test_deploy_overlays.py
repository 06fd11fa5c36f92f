"""base_config chains, platform sections, overrides and YAML anchors (cases/profiles/overlays.yaml)."""

from dataclasses import asdict

import pytest

from conformance.case_files import load, params
from conformance.deploy.deploy_cases import fill, value_at
from reference.deploy.resolve import load_chain, load_yaml, merge_chain, resolve_deployment

pytestmark = pytest.mark.cpu


def _write(directory, files):
    (directory / "base.yaml").write_text(load("profiles/overlays")["base"])
    for name, text in files.items():
        (directory / name).write_text(text)


@pytest.mark.parametrize("case", params("profiles/overlays"))
def test_overlay_case(case, tmp_path):
    _write(tmp_path, case["files"])
    case = fill(case, str(tmp_path))
    profile = tmp_path / case["profile"]
    if "error" in case:
        with pytest.raises(ValueError) as info:
            resolve_deployment(profile, case["platform"], case.get("overrides"))
        assert str(info.value) == case["error"]
        return
    d = resolve_deployment(profile, case["platform"], case.get("overrides"))
    tree = dict(d.config, geometry=asdict(d.geometry), engine_kwargs=d.engine_kwargs)
    for key, value in case["expect"].get("values", {}).items():
        assert value_at(tree, key) == value, key
    for key, origin in case["expect"].get("origins", {}).items():
        assert d.origins[key] == origin, key


def _at(doc, path):
    for part in path:
        doc = doc[part]
    return doc


@pytest.mark.parametrize("case", params("profiles/overlays", "anchor_cases"))
def test_anchor_aliases_are_independent(case, tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text(case["file"])
    doc = load_yaml(path)
    before = [repr(_at(doc, p)) for p in case["same_anchor"]]
    target = _at(doc, case["mutate"])
    if isinstance(target, list):
        target.append(999)
    else:
        target["mutated"] = True
    assert [repr(_at(doc, p)) for p in case["same_anchor"]] == before


def test_anchor_aliases_are_independent_after_merge_and_resolution(tmp_path):
    _write(tmp_path, {})
    (tmp_path / "p.yaml").write_text(
        "base_config: base.yaml\n"
        "x-sizes: &sizes [1, 2, 4]\n"
        "connectors: {talker_to_code2wav: {extra: {decode_sizes: *sizes}}}\n"
        "platforms:\n"
        "  cpu: {connectors: {talker_to_code2wav: {extra: {decode_sizes: *sizes}}}}\n"
        "  xpu: {connectors: {talker_to_code2wav: {extra: {decode_sizes: *sizes}}}}\n"
    )
    merged = merge_chain(load_chain(tmp_path / "p.yaml"))
    merged[("connectors", "talker_to_code2wav", "extra", "decode_sizes")][0].append(8)
    assert merged[("platforms", "cpu", "connectors", "talker_to_code2wav", "extra", "decode_sizes")][0] == [1, 2, 4]
    assert merged[("platforms", "xpu", "connectors", "talker_to_code2wav", "extra", "decode_sizes")][0] == [1, 2, 4]
    d = resolve_deployment(tmp_path / "p.yaml", "cuda")
    d.config["stages"][0]["compilation_config"]["cudagraph_capture_sizes"].append(8)
    assert d.engine_kwargs["compilation_config"]["cudagraph_capture_sizes"] == [1, 2, 4]
    d.stages[1]["devices"] = "changed"
    assert d.config["stages"][1]["devices"] == "0"
    d.codec_stage["max_num_seqs"] = 99
    assert d.config["stages"][1]["max_num_seqs"] == 16
    d.connectors["talker_to_code2wav"]["name"] = "changed"
    assert d.config["connectors"]["talker_to_code2wav"]["name"] == "SharedMemoryConnector"
    cpu = resolve_deployment(tmp_path / "p.yaml", "cpu")
    assert cpu.config["connectors"]["talker_to_code2wav"]["extra"]["decode_sizes"] == [1, 2, 4]
