"""The bundled codec's decode path (code2wav): codes [8, T] -> 24 kHz PCM [T * 960].

    per codebook q: codebook_q[codes[q]] (64-d) -> project_out_q (-> 1024); sum over q
    -> fc2 (-> 256) -> DAC decoder (transformers `DacDecoder`, output_padding = stride % 2, no tanh)

The DAC decoder is transformers' module; only the RVQ lookup, project_out and fc2 are written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn
from transformers import DacConfig
from transformers.models.dac.modeling_dac import DacDecoder

from reference.codebooks import CODEC_PREFIX
from reference.codec.config import CodecConfig
from reference.codec.layouts import CodecWeightsError, to_canonical

CONFIG_KEY = "audio_tokenizer_config"


def build_dac_decoder(cfg: CodecConfig) -> DacDecoder:
    """transformers' DacDecoder with the Higgs changes: output_padding = stride % 2 and no tanh."""
    ratios = list(cfg.upsampling_ratios)
    dac_config = DacConfig(
        encoder_hidden_size=64,
        downsampling_ratios=ratios,
        upsampling_ratios=ratios,
        decoder_hidden_size=cfg.decoder_hidden_size,
        hidden_size=cfg.acoustic_hidden_size,
        sampling_rate=cfg.sample_rate,
    )
    dac_config.upsampling_ratios = ratios  # DacConfig derives these from the encoder's ratios
    dac_config.hidden_size = cfg.acoustic_hidden_size
    decoder = DacDecoder(dac_config)
    for module in decoder.modules():
        if isinstance(module, nn.ConvTranspose1d):
            module.output_padding = (module.stride[0] % 2,)
    decoder.tanh = nn.Identity()
    return decoder


def _weight_norm_convs(decoder: DacDecoder) -> dict[str, nn.Module]:
    """The decoder convs transformers' `apply_weight_norm` wraps, by state-dict base name."""
    convs = {"conv1": decoder.conv1, "conv2": decoder.conv2}
    for b, block in enumerate(decoder.block):
        convs[f"block.{b}.conv_t1"] = block.conv_t1
        for u in (1, 2, 3):
            unit = getattr(block, f"res_unit{u}")
            convs[f"block.{b}.res_unit{u}.conv1"] = unit.conv1
            convs[f"block.{b}.res_unit{u}.conv2"] = unit.conv2
    return convs


def _load_decoder(decoder: DacDecoder, tensors: dict[str, torch.Tensor]) -> None:
    """Loads `acoustic_decoder.*` tensors; convs given as weight_g/weight_v get torch's weight norm."""
    sd = {k.removeprefix("acoustic_decoder."): v for k, v in tensors.items() if k.startswith("acoustic_decoder.")}
    for base, conv in _weight_norm_convs(decoder).items():
        if f"{base}.weight_g" in sd:
            # As transformers' HiggsAudioV2Tokenizer.apply_weight_norm: torch's parametrized weight norm.
            torch.nn.utils.parametrizations.weight_norm(conv, name="weight")
            sd[f"{base}.parametrizations.weight.original0"] = sd.pop(f"{base}.weight_g")
            sd[f"{base}.parametrizations.weight.original1"] = sd.pop(f"{base}.weight_v")
    decoder.load_state_dict(sd, strict=True)


class Codec(nn.Module):
    """Decode-only Higgs Audio v2/v3 codec."""

    def __init__(self, cfg: CodecConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layout = "transformers"  # the key layout the weights came in
        n, v, d, h = cfg.num_codebooks, cfg.codebook_size, cfg.codebook_dim, cfg.hidden_size
        self.codebooks = nn.Parameter(torch.zeros(n, v, d), requires_grad=False)  # [8, 1024, 64]
        self.project_out_weight = nn.Parameter(torch.zeros(n, h, d), requires_grad=False)  # [8, 1024, 64]
        self.project_out_bias = nn.Parameter(torch.zeros(n, h), requires_grad=False)  # [8, 1024]
        self.fc2 = nn.Linear(h, cfg.acoustic_hidden_size)
        self.acoustic_decoder = build_dac_decoder(cfg)
        self.tf32 = False  # cuDNN's TF32 convolutions on CUDA: opt-in (extra.codec_tf32), see decode_checked

    @property
    def hop_length(self) -> int:
        return self.cfg.hop_length

    @property
    def sample_rate(self) -> int:
        return self.cfg.sample_rate

    @classmethod
    def from_state_dict(cls, cfg: CodecConfig | dict, state_dict: dict[str, torch.Tensor], *,
                        device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                        source: str = "") -> Codec:
        """Builds a codec from tensors in either key layout (names without the checkpoint prefix)."""
        cfg = cfg if isinstance(cfg, CodecConfig) else CodecConfig.from_dict(cfg)
        layout, tensors = to_canonical(state_dict, cfg, prefix_note=source)
        codec = cls(cfg)
        codec.layout = layout
        with torch.no_grad():
            for q in range(cfg.num_codebooks):
                p = f"quantizer.quantizers.{q}"
                codec.codebooks[q].copy_(tensors[f"{p}.codebook.embed"])
                codec.project_out_weight[q].copy_(tensors[f"{p}.project_out.weight"])
                codec.project_out_bias[q].copy_(tensors[f"{p}.project_out.bias"])
            codec.fc2.weight.copy_(tensors["fc2.weight"])
            codec.fc2.bias.copy_(tensors["fc2.bias"])
        _load_decoder(codec.acoustic_decoder, tensors)
        codec.requires_grad_(False)
        return codec.to(device=device, dtype=dtype).eval()

    def check_codes(self, codes: torch.Tensor) -> None:
        """Raises ValueError unless codes is an integer [8, T] tensor of real codes (0 .. 1023)."""
        n, v = self.cfg.num_codebooks, self.cfg.codebook_size
        if not isinstance(codes, torch.Tensor) or codes.ndim != 2 or codes.shape[0] != n:
            shape = tuple(codes.shape) if hasattr(codes, "shape") else type(codes).__name__
            raise ValueError(f"codes must be a [{n}, T] tensor (codebook, frame), got {shape}")
        if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
            raise ValueError(f"codes must be an integer tensor, got {codes.dtype}")
        if not codes.numel():
            return
        low, high = torch.aminmax(codes)  # one pass: the streams push a frame or a few at a time
        if int(low) >= 0 and int(high) < v:
            return
        bad = ((codes < 0) | (codes >= v)).nonzero()  # [K, 2]
        if len(bad):
            where = ", ".join(f"[{q}, {t}]={int(codes[q, t])}" for q, t in bad[:10].tolist())
            more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
            raise ValueError(
                f"codes must lie in [0, {v - 1}]; out of range at [codebook, frame]: {where}{more}. "
                "BOC/EOC (1024/1025) belong to the delay pattern: revert it and keep real_frames() first"
            )

    def quantized(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, 8, T] -> fc2 output [B, 256, T] (the DAC decoder's input), every window at once."""
        books = torch.arange(codes.shape[1], device=codes.device)[:, None]  # [8, 1]
        vectors = self.codebooks[books, codes]  # [B, 8, T, 64]
        summed = torch.einsum("bqtd,qhd->bth", vectors, self.project_out_weight) + self.project_out_bias.sum(0)
        return self.fc2(summed).transpose(1, 2)  # [B, 256, T]

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """codes LongTensor [8, T] -> float PCM [T * 960] at 24 kHz."""
        self.check_codes(codes)
        return self.decode_batch(codes.unsqueeze(0))[0]  # [T * 960]

    @torch.no_grad()
    def decode_batch(self, codes: torch.Tensor) -> torch.Tensor:
        """codes LongTensor [B, 8, T] (windows of one length) -> float PCM [B, T * 960].

        Item b equals decode(codes[b]) up to float rounding: the convolutions may pick another
        algorithm for another batch size (CPU, 2026-12: about 2e-6 apart, tests/test_codec_stage.py).
        A batch of one runs exactly decode's operations."""
        if not isinstance(codes, torch.Tensor) or codes.ndim != 3:
            shape = tuple(codes.shape) if hasattr(codes, "shape") else type(codes).__name__
            n = self.cfg.num_codebooks
            raise ValueError(f"codes must be a [B, {n}, T] tensor (window, codebook, frame), got {shape}")
        for window in codes:
            self.check_codes(window)
        codes = codes.to(device=self.codebooks.device, dtype=torch.long)
        if codes.shape[2] == 0:
            return torch.zeros(codes.shape[0], 0, dtype=self.codebooks.dtype, device=self.codebooks.device)
        return self.decode_checked(codes)

    @torch.no_grad()
    def decode_checked(self, codes: torch.Tensor) -> torch.Tensor:
        """decode_batch's arithmetic alone: codes already checked, on the codec's device, T >= 1.
        What reference/codec/graphs.py captures."""
        hidden = self.quantized(codes)  # [B, 256, T]
        # Full float32 convolutions on CUDA unless `tf32`: cuDNN's TF32 (on by default in torch) picks
        # its algorithm per input length, so a streamed window and the whole clip round differently
        # (seen on the H200 with windows: 55-76 dB between the stream and the offline decode, against
        # 110 dB in float32). `benchmarks.codec_speed --tf32` measures both sides of that trade.
        with torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, allow_tf32=self.tf32):
            return self.acoustic_decoder(hidden)[:, 0]  # [B, T * 960]


def read_codec_config(checkpoint_dir: str | Path) -> CodecConfig:
    """`audio_tokenizer_config` from the folder's config.json (the real geometry where absent)."""
    path = Path(checkpoint_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"no config.json in {checkpoint_dir}: pass a Higgs Audio v3 checkpoint folder")
    return CodecConfig.from_dict(json.loads(path.read_text()).get(CONFIG_KEY))


def read_codec_tensors(checkpoint_dir: str | Path, prefix: str = CODEC_PREFIX) -> dict[str, torch.Tensor]:
    """Every tensor under `prefix` from every *.safetensors in the folder, prefix stripped."""
    files = sorted(Path(checkpoint_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {checkpoint_dir}")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            for key in handle.keys():
                if key.startswith(prefix):
                    tensors[key.removeprefix(prefix)] = handle.get_tensor(key)
    if not tensors:
        raise CodecWeightsError(f"no codec tensors (prefix {prefix!r}) in {[f.name for f in files]}")
    return tensors


def load_codec(checkpoint_dir: str | Path, device: str | torch.device = "cpu",
               dtype: torch.dtype = torch.float32) -> Codec:
    """The codec bundled in a checkpoint folder (config.json + *.safetensors), in either key layout."""
    cfg = read_codec_config(checkpoint_dir)
    tensors = read_codec_tensors(checkpoint_dir)
    note = f" (prefix {CODEC_PREFIX!r} in {checkpoint_dir})"
    return Codec.from_state_dict(cfg, tensors, device=device, dtype=dtype, source=note)
