"""The reference codec: loading both key layouts from a checkpoint folder, errors, decode contract."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from torch import nn
from transformers.models.dac.modeling_dac import DacDecoder

from conformance.oracles import codec_numpy
from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from higgs_dummy.codec_weights import codec_config, codec_state_dict, to_boson_layout
from reference.codec.model import CODEC_PREFIX, Codec, load_codec
from reference.codec.layouts import CodecWeightsError

pytestmark = pytest.mark.cpu

TINY = codec_config("tiny")


@pytest.fixture(autouse=True)
def _single_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def tiny_sd():
    return codec_state_dict(TINY, 0)


def codes_of(frames: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 1024, (8, frames), generator=torch.Generator().manual_seed(seed))


def write_checkpoint(path, codec_tensors, config=TINY, shards=1, extra=True):
    """A checkpoint folder: config.json and the codec under its prefix, beside talker tensors."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "higgs_multimodal_qwen3"}
    if config is not None:
        cfg["audio_tokenizer_config"] = config
    (path / "config.json").write_text(json.dumps(cfg))
    tensors = {CODEC_PREFIX + k: v.contiguous() for k, v in codec_tensors.items()}
    if extra:  # tensors the codec loader must skip
        tensors["body.norm.weight"] = torch.ones(4)
        tensors[CODEC_PREFIX + "acoustic_encoder.conv1.weight"] = torch.ones(2, 1, 7)
        tensors[CODEC_PREFIX + "semantic_model.encoder.layer_norm.weight"] = torch.ones(3)
    names = sorted(tensors)
    for i in range(shards):
        part = {n: tensors[n] for n in names[i::shards]}
        save_file(part, str(path / f"model-{i + 1:05d}-of-{shards:05d}.safetensors"))
    return path


def test_decode_is_pcm_of_960_samples_per_frame():
    codec = fixture_codec()
    pcm = codec.decode(codes_of(12))
    assert pcm.shape == (12 * 960,) and pcm.dtype == torch.float32
    assert torch.isfinite(pcm).all()
    rms = float(pcm.pow(2).mean().sqrt())
    assert 0.03 < rms < 0.3 and float(pcm.abs().max()) < 1.0, rms  # audible, not clipped
    assert codec.decode(codes_of(0)).shape == (0,)


def test_decode_matches_the_numpy_oracle(tiny_sd):
    codes = codes_of(4, seed=9)
    want = codec_numpy.decode(codes.numpy(), {k: v.numpy() for k, v in tiny_sd.items()})
    np.testing.assert_allclose(fixture_codec().decode(codes).double().numpy(), want, atol=2e-5, rtol=0)


def test_decoder_is_transformers_dac_without_tanh_and_with_odd_stride_output_padding():
    decoder = fixture_codec().acoustic_decoder
    assert isinstance(decoder, DacDecoder)
    assert isinstance(decoder.tanh, nn.Identity)
    paddings = [(b.conv_t1.stride[0], b.conv_t1.output_padding[0]) for b in decoder.block]
    assert paddings == [(8, 0), (5, 1), (4, 0), (2, 0), (3, 1)]


def test_same_seed_gives_bit_identical_weights_and_another_seed_does_not():
    a, b, c = codec_state_dict(TINY, 0), codec_state_dict(TINY, 0), codec_state_dict(TINY, 1)
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["fc2.weight"], c["fc2.weight"])


@pytest.mark.parametrize("layout", ["transformers", "boson"])
def test_load_codec_reads_either_layout_from_sharded_safetensors(tmp_path, tiny_sd, layout):
    tensors = tiny_sd if layout == "transformers" else to_boson_layout(tiny_sd, TINY)
    codec = load_codec(write_checkpoint(tmp_path / layout, tensors, shards=3))
    assert codec.layout == layout
    codes = codes_of(6, seed=2)
    torch.testing.assert_close(codec.decode(codes), fixture_codec().decode(codes), atol=1e-5, rtol=0)


def test_boson_layout_names_follow_the_model_pth_convention(tiny_sd):
    boson = to_boson_layout(tiny_sd, TINY)
    for name in ("quantizer.vq.layers.7._codebook.embed", "quantizer.vq.layers.0.project_out.bias",
                 "fc_post2.weight", "decoder_2.model.0.weight_g", "decoder_2.model.1.block.0.alpha",
                 "decoder_2.model.5.block.1.weight_v", "decoder_2.model.3.block.4.block.3.bias",
                 "decoder_2.model.6.alpha", "decoder_2.model.7.weight_v"):
        assert name in boson, name
    split = sum(k.endswith(".weight") and k.startswith("acoustic_decoder.") for k in tiny_sd)  # into _g and _v
    assert len(boson) == len(tiny_sd) + split


def test_boson_layout_under_the_acoustic_decoder_root_and_fc2_also_loads(tiny_sd):
    boson = to_boson_layout(tiny_sd, TINY)
    renamed = {k.replace("decoder_2.", "acoustic_decoder.").replace("fc_post2.", "fc2."): v for k, v in boson.items()}
    codec = Codec.from_state_dict(TINY, renamed)
    assert codec.layout == "boson"
    torch.testing.assert_close(codec.decode(codes_of(3)), fixture_codec().decode(codes_of(3)), atol=1e-5, rtol=0)


def test_weight_norm_factors_are_applied_not_ignored(tiny_sd):
    boson = to_boson_layout(tiny_sd, TINY)
    plain_v = {k.replace(".weight_v", ".weight"): v for k, v in boson.items() if not k.endswith(".weight_g")}
    wrong = Codec.from_state_dict(TINY, plain_v).decode(codes_of(3))
    assert (wrong - fixture_codec().decode(codes_of(3))).abs().max() > 1e-2


def test_parametrized_weight_norm_names_load(tiny_sd):
    from reference.codec.layouts import boson_base

    boson = to_boson_layout(tiny_sd, TINY)
    sd = dict(tiny_sd)
    for key in [k for k in tiny_sd if k.startswith("acoustic_decoder.") and k.endswith(".weight")]:
        base = key.removesuffix(".weight")
        twin = boson_base(base, num_blocks=5)
        del sd[key]
        sd[f"{base}.parametrizations.weight.original0"] = boson[f"{twin}.weight_g"]
        sd[f"{base}.parametrizations.weight.original1"] = boson[f"{twin}.weight_v"]
    codec = Codec.from_state_dict(TINY, sd)
    torch.testing.assert_close(codec.decode(codes_of(3)), fixture_codec().decode(codes_of(3)), atol=1e-5, rtol=0)


def test_codebook_weight_alias_loads(tiny_sd):
    sd = {k.replace("codebook.embed", "codebook.weight"): v for k, v in tiny_sd.items()}
    torch.testing.assert_close(Codec.from_state_dict(TINY, sd).decode(codes_of(2)), fixture_codec().decode(codes_of(2)))


def test_missing_keys_are_named_with_the_layout_tried(tmp_path, tiny_sd):
    sd = {k: v for k, v in tiny_sd.items() if k not in ("acoustic_decoder.block.1.conv_t1.weight", "fc2.bias")}
    with pytest.raises(CodecWeightsError) as err:
        load_codec(write_checkpoint(tmp_path, sd))
    text = str(err.value)
    assert "'transformers' key layout" in text and "2 missing" in text
    assert "acoustic_decoder.block.1.conv_t1{.weight | .weight_g+.weight_v" in text and "fc2.bias" in text
    assert CODEC_PREFIX in text


def test_missing_boson_keys_are_named_in_boson_terms(tiny_sd):
    boson = to_boson_layout(tiny_sd, TINY)
    del boson["decoder_2.model.2.block.1.weight_v"]
    with pytest.raises(CodecWeightsError, match=r"'boson' key layout.*\n  decoder_2\.model\.2\.block\.1\{"):
        Codec.from_state_dict(TINY, boson)


def test_a_wrong_shape_names_the_tensor(tiny_sd):
    sd = dict(tiny_sd, **{"acoustic_decoder.block.0.res_unit2.conv1.weight": torch.zeros(32, 32, 5)})
    message = r"acoustic_decoder\.block\.0\.res_unit2\.conv1\.weight has shape \(32, 32, 5\)"
    with pytest.raises(CodecWeightsError, match=message):
        Codec.from_state_dict(TINY, sd)


def test_decoder_tensors_beyond_the_configured_blocks_are_an_error(tiny_sd):
    sd = dict(tiny_sd, **{"acoustic_decoder.block.5.snake1.alpha": torch.ones(1, 2, 1)})
    with pytest.raises(CodecWeightsError, match="upsampling_ratios"):
        Codec.from_state_dict(TINY, sd)


def test_config_without_codec_section_uses_the_real_geometry_and_checks_shapes(tmp_path, tiny_sd):
    # No audio_tokenizer_config: the real 1024-channel decoder is assumed; tiny tensors then mismatch.
    message = r"acoustic_decoder\.conv1\.weight has shape \(64, 256, 7\), expected \(1024, 256, 7\)"
    with pytest.raises(CodecWeightsError, match=message):
        load_codec(write_checkpoint(tmp_path, tiny_sd, config=None))


def test_folder_errors_say_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_codec(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"audio_tokenizer_config": TINY}))
    with pytest.raises(FileNotFoundError, match="safetensors"):
        load_codec(tmp_path)
    save_file({"body.norm.weight": torch.ones(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(CodecWeightsError, match="no codec tensors"):
        load_codec(tmp_path)


@pytest.mark.parametrize(
    "codes, message",
    [
        (torch.zeros(7, 3, dtype=torch.long), r"\[8, T\]"),
        (torch.zeros(8, 3), "integer"),
        (torch.zeros(8, dtype=torch.long), r"\[8, T\]"),
    ],
)
def test_bad_code_shapes_and_dtypes(codes, message):
    with pytest.raises(ValueError, match=message):
        fixture_codec().decode(codes)


def test_out_of_range_codes_name_their_positions():
    codes = codes_of(6)
    codes[3, 5] = 1024
    codes[0, 2] = -1
    with pytest.raises(ValueError, match=r"\[0, 2\]=-1, \[3, 5\]=1024") as err:
        fixture_codec().decode(codes)
    assert "real_frames" in str(err.value)


def test_real_size_decoder_builds_and_decodes():
    codec = fixture_codec("4b")
    assert codec.acoustic_decoder.conv1.weight.shape == (1024, 256, 7)
    pcm = codec.decode(codes_of(2))
    assert pcm.shape == (1920,) and torch.isfinite(pcm).all()
