"""The bundled codec's geometry, read from config.json's `audio_tokenizer_config`.

The dict follows transformers' `HiggsAudioV2TokenizerConfig` (decode side only):

    {"model_type": "higgs_audio_v2_tokenizer", "sample_rate": 24000,
     "num_codebooks": 8, "codebook_size": 1024, "codebook_dim": 64,
     "hidden_size": 1024,                     # RVQ output width (project_out), fc2 input
     "acoustic_model_config": {"model_type": "dac", "hidden_size": 256,   # fc2 output, decoder input
                               "decoder_hidden_size": 1024, "upsampling_ratios": [8, 5, 4, 2, 3], ...}}

Missing keys take the real model's values (upstream hard-codes this geometry); the loader then
checks every tensor's shape against it, so a wrong geometry fails with the tensor's name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

REAL_UPSAMPLING_RATIOS = (8, 5, 4, 2, 3)


@dataclass(frozen=True)
class CodecConfig:
    num_codebooks: int = 8
    codebook_size: int = 1024
    codebook_dim: int = 64
    hidden_size: int = 1024  # project_out output, summed over codebooks, fc2 input
    acoustic_hidden_size: int = 256  # fc2 output, DAC decoder input
    decoder_hidden_size: int = 1024  # channels after the decoder's first conv
    upsampling_ratios: tuple[int, ...] = field(default=REAL_UPSAMPLING_RATIOS)
    sample_rate: int = 24000

    def __post_init__(self) -> None:
        object.__setattr__(self, "upsampling_ratios", tuple(int(r) for r in self.upsampling_ratios))
        for name in ("num_codebooks", "codebook_size", "codebook_dim", "hidden_size",
                     "acoustic_hidden_size", "decoder_hidden_size", "sample_rate"):
            if getattr(self, name) < 1:
                raise ValueError(f"audio_tokenizer_config: {name} must be >= 1, got {getattr(self, name)}")
        if not self.upsampling_ratios or min(self.upsampling_ratios) < 1:
            raise ValueError(
                f"audio_tokenizer_config: upsampling_ratios must be positive, got {self.upsampling_ratios}"
            )
        if self.decoder_hidden_size % 2 ** len(self.upsampling_ratios):
            raise ValueError(
                f"audio_tokenizer_config: decoder_hidden_size {self.decoder_hidden_size} must be divisible by "
                f"2**{len(self.upsampling_ratios)} (the channels halve in every decoder block)"
            )

    @property
    def hop_length(self) -> int:
        """Samples per codec frame (960 for the real codec: 25 frames/s at 24 kHz)."""
        return math.prod(self.upsampling_ratios)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> CodecConfig:
        d = dict(d or {})
        acoustic = dict(d.get("acoustic_model_config") or {})
        defaults = cls()
        return cls(
            num_codebooks=int(d.get("num_codebooks", defaults.num_codebooks)),
            codebook_size=int(d.get("codebook_size", defaults.codebook_size)),
            codebook_dim=int(d.get("codebook_dim", defaults.codebook_dim)),
            hidden_size=int(d.get("hidden_size", defaults.hidden_size)),
            acoustic_hidden_size=int(acoustic.get("hidden_size", defaults.acoustic_hidden_size)),
            decoder_hidden_size=int(acoustic.get("decoder_hidden_size", defaults.decoder_hidden_size)),
            upsampling_ratios=tuple(acoustic.get("upsampling_ratios", defaults.upsampling_ratios)),
            sample_rate=int(d.get("sample_rate", defaults.sample_rate)),
        )

    def to_dict(self) -> dict[str, Any]:
        ratios = list(self.upsampling_ratios)
        return {
            "model_type": "higgs_audio_v2_tokenizer",
            "sample_rate": self.sample_rate,
            "num_codebooks": self.num_codebooks,
            "codebook_size": self.codebook_size,
            "codebook_dim": self.codebook_dim,
            "hidden_size": self.hidden_size,
            "acoustic_model_config": {
                "model_type": "dac",
                "hidden_size": self.acoustic_hidden_size,
                "decoder_hidden_size": self.decoder_hidden_size,
                "upsampling_ratios": ratios,
                "downsampling_ratios": ratios,
                "encoder_hidden_size": 64,
                "sampling_rate": self.sample_rate,
                "hop_length": self.hop_length,
            },
        }
