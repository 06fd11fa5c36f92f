"""The Hugging Face config of a Higgs Audio v3 checkpoint (`model_type: higgs_multimodal_qwen3`).

The backbone is a plain Qwen3 (`text_config`); the audio side is described by
`audio_encoder_config` (8 discrete codebooks of 1026 ids: 1024 codes, BOC, EOC) and by the
bundled codec's `audio_tokenizer_config`.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig, Qwen3Config

MODEL_TYPE = "higgs_multimodal_qwen3"
ARCHITECTURE = "HiggsMultimodalQwen3ForConditionalGeneration"
DEFAULT_ROPE_THETA = 1_000_000.0


class HiggsMultimodalQwen3Config(PretrainedConfig):
    model_type = MODEL_TYPE
    sub_configs = {"text_config": Qwen3Config}

    def __init__(
        self,
        text_config: dict | Qwen3Config | None = None,
        audio_encoder_config: dict | None = None,
        audio_tokenizer_config: dict | None = None,
        audio_stream_bos_id: int = 1024,
        audio_stream_eos_id: int = 1025,
        sample_rate: int = 24000,
        frame_rate: int = 25,
        **kwargs: Any,
    ) -> None:
        if isinstance(text_config, dict):
            text_config = dict(text_config)
            text_config.setdefault("rope_theta", DEFAULT_ROPE_THETA)
            text_config.pop("model_type", None)
            text_config = Qwen3Config(**text_config)
        self.text_config = text_config if text_config is not None else Qwen3Config()
        self.audio_encoder_config = dict(audio_encoder_config or {})
        self.audio_tokenizer_config = dict(audio_tokenizer_config or {})
        self.audio_stream_bos_id = audio_stream_bos_id
        self.audio_stream_eos_id = audio_stream_eos_id
        self.sample_rate = sample_rate
        self.frame_rate = frame_rate
        super().__init__(**kwargs)

    @property
    def num_codebooks(self) -> int:
        return int(self.audio_encoder_config.get("num_codebooks", 8))

    @property
    def codebook_vocab_size(self) -> int:
        """Ids per codebook: 1024 codes + BOC + EOC."""
        return int(self.audio_encoder_config.get("vocab_size", 1026))

    def get_text_config(self, decoder: bool | None = None, encoder: bool | None = None) -> Qwen3Config:
        return self.text_config


def register_with_transformers() -> None:
    """Make `AutoConfig` resolve `model_type: higgs_multimodal_qwen3` (idempotent)."""
    from transformers import AutoConfig

    try:
        AutoConfig.register(MODEL_TYPE, HiggsMultimodalQwen3Config)
    except ValueError:  # already registered in this process
        pass
