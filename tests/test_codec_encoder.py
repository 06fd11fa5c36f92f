"""Reference audio in: WAV reading, resampling and the bundled audio tokenizer's encoder (issue #15).

The encoder is the tiny dummy (higgs_dummy.encoder_weights) built in memory; one test goes
through a checkpoint folder. `test_codes_match_transformers` compares against transformers' own
HiggsAudioV2TokenizerModel (see its docstring for the torchaudio stub it needs).
"""

import importlib.machinery
import json
import math
import struct
import sys
import types
import wave

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from higgs_dummy.codec_instances import fixture_codec, one_torch_thread
from higgs_dummy.codec_weights import codec_config, codec_state_dict
from higgs_dummy.encoder_weights import encoder_state_dict, with_encoder_config
from reference.codec.encoder import CodecEncoder, frames_for, load_encoder
from reference.codec.layouts import CodecWeightsError
from reference.codec.model import CODEC_PREFIX, load_codec
from reference.codec.wav_io import AudioInputError, read_wav, resample, write_wav

pytestmark = pytest.mark.cpu

TINY = with_encoder_config(codec_config("tiny"), "tiny")


@pytest.fixture(autouse=True)
def _single_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def tiny_sd():
    return {**codec_state_dict(TINY, 0), **encoder_state_dict("tiny", 0)}


@pytest.fixture(scope="module")
def encoder(tiny_sd):
    return CodecEncoder.from_state_dict(TINY, tiny_sd)


def speech_like(n: int, sr: int = 24000, seed: int = 0) -> torch.Tensor:
    """A voiced-sounding test signal: harmonics of a gliding pitch, syllable envelope, some noise."""
    t = torch.arange(n, dtype=torch.float64) / sr
    pitch = 2 * torch.pi * (120 * t + 15 * t**2)
    voiced = sum(torch.sin(k * pitch) / k for k in range(1, 6))
    envelope = 0.5 * (1 - torch.cos(2 * torch.pi * 4 * t))
    noise = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (0.2 * envelope * voiced + 0.01 * noise).float()


def test_encode_is_deterministic(encoder, tiny_sd):
    wav = speech_like(24000)
    first = encoder.encode(wav, 24000)
    assert torch.equal(first, encoder.encode(wav.clone(), 24000))
    rebuilt = CodecEncoder.from_state_dict(TINY, {k: v.clone() for k, v in tiny_sd.items()})
    assert torch.equal(first, rebuilt.encode(wav.numpy(), 24000))  # numpy input, fresh build
    assert torch.equal(encoder_state_dict("tiny", 0)["fc.weight"], tiny_sd["fc.weight"])


def test_codes_shape_range_and_spread(encoder):
    codes = encoder.encode(speech_like(24000), 24000)
    assert codes.dtype == torch.long and codes.shape == (8, 25)
    assert int(codes.min()) >= 0 and int(codes.max()) <= 1023
    assert all(len(set(row.tolist())) > 5 for row in codes), "codes collapsed onto a few entries"


@pytest.mark.parametrize("n", [960 * 3, 960 * 3 + 118, 960 * 3 + 119, 960 * 4 - 1, 119, 500])
def test_frame_count_rule(encoder, n):
    """T = floor((N + 841) / 960): exact multiples give N / 960; a frame is added 119 samples past."""
    codes = encoder.encode(speech_like(n), 24000)
    assert codes.shape == (8, frames_for(n))
    assert frames_for(960 * 3) == 3 and frames_for(960 * 3 + 118) == 3 and frames_for(960 * 3 + 119) == 4


def test_encode_then_decode_is_length_exact(encoder):
    codec = fixture_codec("tiny", 0)
    for frames in (1, 7, 25):
        codes = encoder.encode(speech_like(frames * 960), 24000)
        assert codes.shape == (8, frames)
        audio = codec.decode(codes)
        assert audio.shape == (frames * 960,) and torch.isfinite(audio).all()
        assert torch.equal(audio, codec.decode(encoder.encode(speech_like(frames * 960), 24000)))


def test_other_sample_rates_resample_to_24k(encoder):
    wav16 = speech_like(16000, sr=16000)
    up = resample(wav16, 16000, 24000)
    assert up.shape == (24000,)
    assert torch.equal(encoder.encode(wav16, 16000), encoder.encode(up, 24000))
    tone = torch.sin(2 * torch.pi * 440 * torch.arange(24000) / 24000).float()
    down = resample(tone, 24000, 16000)
    ref = torch.sin(2 * torch.pi * 440 * torch.arange(16000) / 16000).float()
    assert down.shape == (16000,) and (down - ref)[200:-200].abs().max() < 2e-3  # in-band tone kept
    assert resample(tone, 44100, 24000).shape == (math.ceil(24000 * 24000 / 44100),)


# torchaudio 2.11.1's functional.resample (its pure-Python code, loaded beside torch 2.13 with the
# C extension removed; checked once outside the repo) on sin(0.05 n (1 + n / 1000)), n < 300:
# {(orig, new): (length, {index: value})}. Our resampler matched it bit for bit there.
TORCHAUDIO_VALUES = {
    (24000, 16000): (200, {0: 0.004903016146272421, 1: 0.07423308491706848, 5: 0.36903929710388184,
                           17: 0.9659761190414429, 40: -0.03841343894600868, 100: 0.7174490094184875,
                           198: 0.38773396611213684, 199: 0.5337702035903931}),
    (44100, 24000): (164, {0: 0.007300190161913633, 1: 0.09080633521080017, 5: 0.4473209083080292,
                           17: 0.9995889067649841, 40: -0.7200819849967957, 82: 0.6861733198165894,
                           162: 0.504167914390564, 163: 0.2688172459602356}),
    (16000, 24000): (450, {0: 0.00013937441690359265, 1: 0.030134575441479683, 5: 0.16697411239147186,
                           17: 0.5426155924797058, 40: 0.9803100824356079, 225: 0.7172238826751709,
                           448: 0.5913052558898926, 449: 0.37883952260017395}),
}


@pytest.mark.parametrize("rates", sorted(TORCHAUDIO_VALUES))
def test_resample_matches_torchaudio_values(rates):
    n = torch.arange(300, dtype=torch.float32)
    out = resample(torch.sin(0.05 * n * (1 + n / 1000)), *rates)
    length, values = TORCHAUDIO_VALUES[rates]
    assert out.shape == (length,)
    for i, v in values.items():
        assert abs(float(out[i]) - v) < 1e-6, (i, float(out[i]), v)


def _write_raw_wav(path, frames: bytes, channels: int, width: int, rate: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(frames)


def test_wav_round_trip(tmp_path, encoder):
    wav = speech_like(4800).numpy()
    path = write_wav(tmp_path / "ref.wav", wav, 24000)
    back, sr = read_wav(path)
    assert sr == 24000 and back.dtype == np.float32 and back.shape == wav.shape
    assert np.abs(back - wav).max() <= 1 / 32767
    assert torch.equal(encoder.encode(back, sr), encoder.encode(read_wav(path)[0], 24000))
    # 24-bit stereo at 16 kHz: channels averaged, resampled on request
    left, right = [0, 2**22, -(2**23), 2**23 - 1], [0, -(2**22), 0, 2**23 - 1]
    frames = b"".join(struct.pack("<i", x)[:3] + struct.pack("<i", y)[:3] for x, y in zip(left, right))
    _write_raw_wav(tmp_path / "st.wav", frames, channels=2, width=3, rate=16000)
    mono, sr = read_wav(tmp_path / "st.wav")
    assert sr == 16000 and np.allclose(mono, [0.0, 0.0, -0.5, (2**23 - 1) / 2**23])
    up, sr = read_wav(tmp_path / "st.wav", target_sr=24000)
    assert sr == 24000 and up.shape == (6,)


def test_bad_files_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        read_wav(tmp_path / "missing.wav")
    (tmp_path / "text.wav").write_text("this is not audio")
    with pytest.raises(AudioInputError, match="PCM WAV"):
        read_wav(tmp_path / "text.wav")
    # a 32-bit float WAV (format 3): wave cannot read it, the error says what to do
    data = np.zeros(10, dtype="<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, 24000, 96000, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    (tmp_path / "float.wav").write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)
    with pytest.raises(AudioInputError, match="pcm_s16le"):
        read_wav(tmp_path / "float.wav")
    _write_raw_wav(tmp_path / "empty.wav", b"", channels=1, width=2, rate=24000)
    with pytest.raises(AudioInputError, match="no samples"):
        read_wav(tmp_path / "empty.wav")


def test_bad_arrays_name_the_problem(encoder):
    cases = [
        (np.zeros(0, dtype=np.float32), "empty"),
        (np.zeros(2400, dtype=np.int16), "float samples"),
        (torch.zeros(2, 2400), "mono"),
        (torch.full((2400,), float("nan")), "NaN"),
        (torch.zeros(118), "too short"),
        ([0.0] * 2400, "numpy array or torch tensor"),
    ]
    for wav, message in cases:
        with pytest.raises(AudioInputError, match=message):
            encoder.encode(wav, 24000)


def test_load_encoder_from_folder(tmp_path, encoder, tiny_sd):
    (tmp_path / "config.json").write_text(json.dumps({"audio_tokenizer_config": TINY}))
    save_file({CODEC_PREFIX + k: v.contiguous() for k, v in tiny_sd.items()}, str(tmp_path / "model.safetensors"))
    loaded = load_encoder(tmp_path)
    wav = speech_like(9600)
    codes = loaded.encode(wav, 24000)
    assert torch.equal(codes, encoder.encode(wav, 24000))
    # the decode side reads the same folder, encoder tensors and fields beside it
    assert torch.equal(load_codec(tmp_path).decode(codes), fixture_codec("tiny", 0).decode(codes))
    # a checkpoint with the decoder only: the error says the encoder is absent
    decode_only = tmp_path / "decode_only"
    decode_only.mkdir()
    (decode_only / "config.json").write_text(json.dumps({"audio_tokenizer_config": TINY}))
    save_file({CODEC_PREFIX + k: v.contiguous() for k, v in codec_state_dict(TINY, 0).items()},
              str(decode_only / "model.safetensors"))
    with pytest.raises(CodecWeightsError, match="bundles no encoder"):
        load_encoder(decode_only)
    bad = dict(tiny_sd)
    bad["fc.weight"] = bad["fc.weight"][:, :10]
    with pytest.raises(CodecWeightsError, match="fc.weight"):
        CodecEncoder.from_state_dict(TINY, bad)


def _weight_normed(sd: dict, names: list[str]) -> dict:
    """The acoustic encoder's convs as (g, v), v scaled per channel so that skipping the norm shows."""
    out = dict(sd)
    for name in names:
        w = out.pop(name)
        g = w.norm(dim=tuple(range(1, w.ndim)), keepdim=True)
        v = w * torch.linspace(0.5, 2.0, w.shape[0]).reshape(-1, *([1] * (w.ndim - 1)))
        out[name.removesuffix("weight") + "weight_g"], out[name.removesuffix("weight") + "weight_v"] = g, v
    return out


def test_codes_match_transformers(monkeypatch, tiny_sd):
    """Same config and tensors in transformers' HiggsAudioV2TokenizerModel -> identical codes.

    transformers' module imports torchaudio at module level and calls torchaudio.functional.resample
    once (24 -> 16 kHz); torchaudio has no build for this torch. Inside this test only, a stub
    torchaudio module whose functional.resample is our resampler is put in sys.modules and
    transformers' torchaudio backend check is patched; both are undone afterwards. The resampler
    itself is therefore not compared here (test_other_sample_rates_resample_to_24k checks it).
    Also checks that weight-normed acoustic encoder convs (weight_g/weight_v) load like
    transformers' apply_weight_norm.
    """
    import transformers  # noqa: F401  (imported before the stub: its import checks torchaudio's spec)
    from transformers.utils import import_utils

    stub = types.ModuleType("torchaudio")
    stub.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
    stub.functional = types.SimpleNamespace(resample=resample)
    monkeypatch.setitem(sys.modules, "torchaudio", stub)
    monkeypatch.setitem(import_utils.BACKENDS_MAPPING, "torchaudio",
                        (lambda: True, import_utils.BACKENDS_MAPPING["torchaudio"][1]))
    name = "transformers.models.higgs_audio_v2_tokenizer.modeling_higgs_audio_v2_tokenizer"
    try:
        from transformers.models.higgs_audio_v2_tokenizer import modeling_higgs_audio_v2_tokenizer as hf
        from transformers.models.higgs_audio_v2_tokenizer.configuration_higgs_audio_v2_tokenizer import (
            HiggsAudioV2TokenizerConfig,
        )

        fields = {k: v for k, v in json.loads(json.dumps(TINY)).items() if k not in ("num_codebooks", "hidden_size")}
        config = HiggsAudioV2TokenizerConfig(**fields)
        assert config.num_quantizers == 8 and config.hidden_size == 1024
        model = hf.HiggsAudioV2TokenizerModel(config).eval()
        model.apply_weight_norm()
        convs = [k for k in tiny_sd if k.startswith("acoustic_encoder.") and k.endswith("conv1.weight")]
        convs += [k for k in tiny_sd if k.startswith("acoustic_encoder.") and k.endswith("conv2.weight")]
        ours_sd = _weight_normed(tiny_sd, convs)
        theirs_sd = {k.replace("weight_g", "parametrizations.weight.original0")
                     .replace("weight_v", "parametrizations.weight.original1"): v
                     for k, v in ours_sd.items() if not k.startswith(("acoustic_decoder.", "fc2."))}
        result = model.load_state_dict(theirs_sd, strict=False)
        assert not result.unexpected_keys
        assert all(k.startswith(("acoustic_decoder.", "decoder_semantic.", "fc1.", "fc2."))
                   or k.endswith(("inited", "cluster_size", "embed_avg")) for k in result.missing_keys)
        ours = CodecEncoder.from_state_dict(TINY, ours_sd)
        for n in (24000, 24000 + 500, 960 * 7 + 119, 300):
            wav = speech_like(n, seed=n)
            with torch.no_grad():
                expected = model.encode(wav[None, None], return_dict=False)[0]
            assert torch.equal(ours.encode(wav, 24000), expected), n
    finally:
        sys.modules.pop(name, None)
