"""The bundled audio tokenizer's encode path: 24 kHz PCM -> codes [8, T] (reference audio in).

    acoustic:  wav [1, 1, N] -> transformers `DacEncoder` (ratios 8, 5, 4, 2, 3)   -> [1, 256, T]
    semantic:  wav -> resample 24 -> 16 kHz (reference.codec.wav_io.resample) -> pad 160 | 160
               -> transformers `HubertModel`, mean of all hidden states, every 2nd frame
               -> semantic encoder (conv, residual conv blocks; ELU)                 -> [1, 768, T]
    fc:        concat (acoustic first) -> Linear 1024 -> 1024
    RVQ:       per codebook q: project_in_q (1024 -> 64), nearest codebook entry (Euclidean),
               residual -= project_out_q(entry); the first `num_codebooks` (8) quantizers.

Tensors (names relative to CODEC_PREFIX, transformers layout): `acoustic_encoder.*`,
`semantic_model.*`, `encoder_semantic.*`, `fc.{weight,bias}`, `quantizer.quantizers.{i}.
{project_in,project_out}.{weight,bias}` and `.codebook.embed` (or `.codebook.weight`).
`decoder_semantic.*`, `fc1.*` and the quantizer's EMA buffers belong to training only.

Length: N samples at 24 kHz give T = floor((N + 841) / 960) frames, N >= 119 (so T * 960
samples give exactly T frames). This is transformers' rule: the semantic branch fixes T; when
the acoustic encoder's own length differs, it runs on the signal zero-padded by 480 each side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import DacConfig, HubertConfig, HubertModel
from transformers.models.dac.modeling_dac import DacEncoder

from reference.codebooks import CODEC_PREFIX
from reference.codec.config import CodecConfig
from reference.codec.encoder_tensors import load_encoder_tensors
from reference.codec.layouts import BOSON, CodecWeightsError, detect_layout
from reference.codec.model import CONFIG_KEY, read_codec_tensors
from reference.codec.wav_io import AudioInputError, resample, to_mono_float

SEMANTIC_PAD = 160  # samples at 16 kHz each side before HuBERT, as transformers does
TRAINING_ONLY = ("decoder_semantic.", "fc1.", "semantic_model.masked_spec_embed")


@dataclass(frozen=True)
class EncoderConfig:
    """The encode-side fields of `audio_tokenizer_config` (transformers' HiggsAudioV2TokenizerConfig)."""

    codec: CodecConfig
    encoder_hidden_size: int = 64
    downsampling_ratios: tuple[int, ...] = (8, 5, 4, 2, 3)
    semantic_model_config: dict = field(default_factory=dict)  # HubertConfig kwargs
    semantic_sample_rate: int = 16000
    downsample_factor: int = 320
    kernel_size: int = 3
    channel_ratios: tuple[float, ...] = (1, 1)
    strides: tuple[int, ...] = (1, 1)
    block_dilations: tuple[int, ...] = (1, 1)
    unit_kernel_size: int = 3

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> EncoderConfig:
        d = dict(d or {})
        codec = CodecConfig.from_dict(d)
        acoustic = dict(d.get("acoustic_model_config") or {})
        semantic = {k: v for k, v in dict(d.get("semantic_model_config") or {}).items() if k != "model_type"}
        cfg = cls(
            codec=codec,
            encoder_hidden_size=int(acoustic.get("encoder_hidden_size", 64)),
            downsampling_ratios=tuple(int(r) for r in acoustic.get("downsampling_ratios", codec.upsampling_ratios)),
            semantic_model_config=semantic,
            **{k: (tuple(d[k]) if isinstance(d[k], list) else d[k]) for k in (
                "semantic_sample_rate", "downsample_factor", "kernel_size", "channel_ratios", "strides",
                "block_dilations", "unit_kernel_size") if k in d},
        )
        cfg.check()
        return cfg

    def hubert_config(self) -> HubertConfig:
        return HubertConfig(**{"mask_time_prob": 0.0, **self.semantic_model_config})

    @property
    def hop_length(self) -> int:
        return int(np.prod(self.downsampling_ratios))

    @property
    def semantic_hidden_size(self) -> int:
        return self.hubert_config().hidden_size

    @property
    def semantic_stride(self) -> int:
        """HuBERT frames per codec frame (2: 50 Hz features, 25 Hz codes)."""
        return int(self.hop_length / (self.codec.sample_rate / self.semantic_sample_rate) / self.downsample_factor)

    def check(self) -> None:
        c = self.codec
        if self.hop_length != c.hop_length:
            raise ValueError(f"audio_tokenizer_config: the encoder's downsampling_ratios {self.downsampling_ratios} "
                             f"give hop {self.hop_length}, the decoder's upsampling_ratios hop {c.hop_length}")
        width = c.acoustic_hidden_size + self.semantic_hidden_size
        if width != c.hidden_size:
            raise ValueError(f"audio_tokenizer_config: acoustic hidden_size {c.acoustic_hidden_size} + semantic "
                             f"hidden_size {self.semantic_hidden_size} = {width}, but the RVQ width is {c.hidden_size}")
        if len(self.strides) != len(self.channel_ratios):
            raise ValueError("audio_tokenizer_config: strides and channel_ratios must have the same length")


class ResidualUnit(nn.Module):
    def __init__(self, cfg: EncoderConfig, channels: int, dilation: int) -> None:
        super().__init__()
        k = cfg.unit_kernel_size
        self.conv1 = nn.Conv1d(channels, channels, k, padding=(k - 1) // 2 * dilation, dilation=dilation, bias=False)
        self.conv2 = nn.Conv1d(channels, channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.elu(self.conv1(F.elu(x))))


class SemanticEncoderBlock(nn.Module):
    def __init__(self, cfg: EncoderConfig, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.res_units = nn.ModuleList(ResidualUnit(cfg, cin, d) for d in cfg.block_dilations)
        kernel = 3 if stride == 1 else 2 * stride
        self.conv = nn.Conv1d(cin, cout, kernel, stride=stride, padding=(kernel - 1) // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for unit in self.res_units:
            x = unit(x)
        return self.conv(x)


class SemanticEncoder(nn.Module):
    """`encoder_semantic.*`: conv k3 (no bias), then one block per stride."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        width = cfg.semantic_hidden_size
        self.conv = nn.Conv1d(width, width, cfg.kernel_size, padding=cfg.kernel_size // 2, bias=False)
        blocks, cin = [], width
        for ratio, stride in zip(cfg.channel_ratios, cfg.strides):
            blocks.append(SemanticEncoderBlock(cfg, cin, int(width * ratio), stride))
            cin = int(width * ratio)
        self.conv_blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        for block in self.conv_blocks:
            x = block(x)
        return x


def build_dac_encoder(cfg: EncoderConfig) -> DacEncoder:
    dac = DacConfig(encoder_hidden_size=cfg.encoder_hidden_size, downsampling_ratios=list(cfg.downsampling_ratios),
                    hidden_size=cfg.codec.acoustic_hidden_size, sampling_rate=cfg.codec.sample_rate)
    return DacEncoder(dac)


def conv_length(length: int, module: nn.Module) -> int:
    """Output length after every Conv1d in `module` (residual units keep the length)."""
    for conv in module.modules():
        if isinstance(conv, nn.Conv1d):
            (k,), (s,), (p,), (d,) = conv.kernel_size, conv.stride, conv.padding, conv.dilation
            length = (length + 2 * p - d * (k - 1) - 1) // s + 1
    return length


def frames_for(num_samples: int) -> int:
    """Codec frames the encoder gives for `num_samples` at 24 kHz (real geometry)."""
    return (num_samples + 841) // 960


class CodecEncoder(nn.Module):
    """Encode-only Higgs Audio v2/v3 audio tokenizer (what voice clone needs from a WAV)."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        c = cfg.codec
        self.cfg = cfg
        self.acoustic_encoder = build_dac_encoder(cfg)
        self.semantic_model = HubertModel(cfg.hubert_config())
        self.encoder_semantic = SemanticEncoder(cfg)
        self.fc = nn.Linear(c.hidden_size, c.hidden_size)
        self.project_in = nn.ModuleList(nn.Linear(c.hidden_size, c.codebook_dim) for _ in range(c.num_codebooks))
        self.project_out = nn.ModuleList(nn.Linear(c.codebook_dim, c.hidden_size) for _ in range(c.num_codebooks))
        self.codebooks = nn.Parameter(torch.zeros(c.num_codebooks, c.codebook_size, c.codebook_dim),
                                      requires_grad=False)

    @property
    def sample_rate(self) -> int:
        return self.cfg.codec.sample_rate

    @classmethod
    def from_state_dict(cls, cfg: EncoderConfig | dict, state_dict: dict[str, torch.Tensor], *,
                        device: str | torch.device = "cpu", source: str = "") -> CodecEncoder:
        """Builds the encoder from the bundled tokenizer's tensors (names without the checkpoint prefix)."""
        cfg = cfg if isinstance(cfg, EncoderConfig) else EncoderConfig.from_dict(cfg)
        if detect_layout(list(state_dict)) == BOSON:
            raise CodecWeightsError(f"the codec tensors{source} are in boson-ai's model.pth layout; the encoder "
                                    "reads the transformers layout only (acoustic_encoder.*, semantic_model.*, ...)")
        encoder = cls(cfg)
        load_encoder_tensors(encoder, state_dict, source)
        encoder.requires_grad_(False)
        return encoder.to(device=device, dtype=torch.float32).eval()

    def semantic_features(self, wav: torch.Tensor) -> torch.Tensor:
        """wav [1, 1, N] at 24 kHz -> semantic encoder output [1, 768, T]."""
        x = resample(wav, self.cfg.codec.sample_rate, self.cfg.semantic_sample_rate)[:, 0, :]
        x = F.pad(x, (SEMANTIC_PAD, SEMANTIC_PAD))
        hidden = self.semantic_model(x, output_hidden_states=True).hidden_states
        feats = torch.stack(hidden, dim=1).mean(dim=1)  # [1, F, 768]
        if self.cfg.semantic_stride > 1:
            feats = feats[:, :: self.cfg.semantic_stride, :]
        return self.encoder_semantic(feats.transpose(1, 2))

    def quantize(self, embeddings: torch.Tensor) -> torch.Tensor:
        """RVQ encode of [1, 1024, T] -> [num_codebooks, T] (nearest entry per codebook, residual)."""
        residual = embeddings.transpose(1, 2)  # [1, T, 1024]
        codes = []
        for q in range(self.cfg.codec.num_codebooks):
            x = self.project_in[q](residual).reshape(-1, self.cfg.codec.codebook_dim)  # [T, 64]
            table = self.codebooks[q].t()  # [64, 1024]
            dist = -(x.pow(2).sum(1, keepdim=True) - 2 * x @ table + table.pow(2).sum(0, keepdim=True))
            idx = dist.max(dim=-1).indices  # [T]
            codes.append(idx)
            residual = residual - self.project_out[q](F.embedding(idx, self.codebooks[q]))[None]
        return torch.stack(codes)

    @torch.no_grad()
    def encode(self, wav: np.ndarray | torch.Tensor, sample_rate: int) -> torch.Tensor:
        """Mono float PCM at `sample_rate` -> LongTensor [8, T], T = floor((N + 841) / 960) at 24 kHz."""
        signal = to_mono_float(wav)
        if sample_rate != self.sample_rate:
            signal = resample(signal, sample_rate, self.sample_rate)
        n = signal.shape[-1]
        if n < 119:
            raise AudioInputError(f"reference audio too short: {n} samples at {self.sample_rate} Hz (need >= 119)")
        device = self.codebooks.device
        x = signal.to(device)[None, None]  # [1, 1, N]
        e_semantic = self.semantic_features(x)
        frames = e_semantic.shape[2]
        if conv_length(n, self.acoustic_encoder) != frames:
            pad = self.cfg.hop_length // 2
            x = F.pad(x, (pad, pad))
        e_acoustic = self.acoustic_encoder(x)
        if e_acoustic.shape[2] != frames:
            raise AudioInputError(f"acoustic ({e_acoustic.shape[2]}) and semantic ({frames}) frame counts differ "
                                  f"for {n} samples")
        embeddings = self.fc(torch.cat([e_acoustic, e_semantic], dim=1).transpose(1, 2)).transpose(1, 2)
        return self.quantize(embeddings).cpu().long()


def read_encoder_config(checkpoint_dir: str | Path) -> EncoderConfig:
    path = Path(checkpoint_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"no config.json in {checkpoint_dir}: pass a Higgs Audio v3 checkpoint folder")
    return EncoderConfig.from_dict(json.loads(path.read_text()).get(CONFIG_KEY))


def load_encoder(checkpoint_dir: str | Path, device: str | torch.device = "cpu") -> CodecEncoder:
    """The audio tokenizer's encoder bundled in a checkpoint folder (config.json + *.safetensors)."""
    cfg = read_encoder_config(checkpoint_dir)
    tensors = read_codec_tensors(checkpoint_dir)
    note = f" (prefix {CODEC_PREFIX!r} in {checkpoint_dir})"
    return CodecEncoder.from_state_dict(cfg, tensors, device=device, source=note)
