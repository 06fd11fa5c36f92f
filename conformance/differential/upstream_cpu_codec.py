"""vllm-omni 0.30.0's code2wav stage class on the CPU, fed the codec goldens (`tox -e upstream-cpu`).

`HiggsAudioV3Code2Wav` (model_executor/models/higgs_audio_v3/higgs_audio_v3_code2wav.py) is built
from the tiny checkpoint's config, given the golden's codec tensors (the seeded "tiny" fixture codec,
conformance/differential/codec_cases.py) under the checkpoint's names, as an engine's loader hands
them (`load_weights(iterator)`), and decodes through its stage `forward` (the flat codebook-major
ids talker2code2wav sends). As released it cannot decode our tiny codec on a CPU, for two reasons, each
recorded as a sub-case of its own and pinned (conformance/cases/differential/pinned.yaml):

- `fixed_decoder_width`: for a checkpoint in transformers' layout it builds the DAC decoder from a
  written-in config (code2wav.py:356-371: `decoder_hidden_size: 1024`), not from the checkpoint's
  `audio_tokenizer_config`, so the 64-channel tiny decoder does not load (the 4b-size dummy and the
  real checkpoint have 1024);
- `cuda_query`: `_validate_codes` asks `torch.cuda.is_current_stream_capturing()` (code2wav.py:583),
  which raises on a CPU build of torch ("Tried to instantiate dummy base class").

The decode cases then run with both adapted in this process only (the wheel is not edited): the
decoder builder the module calls gets the golden codec's decoder width (64), and the CUDA query answers
False (no stream captures on a machine without CUDA) while a decode runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conformance.differential import codec_cases
from conformance.differential.verdicts import Check, SubCase

CODE2WAV = "vllm_omni.model_executor.models.higgs_audio_v3.higgs_audio_v3_code2wav"
CODEC_PREFIX = "tied.embedding.modality_embeddings.0.model."  # the codec's tensors in a v3 checkpoint


def golden_codec_tensors() -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) of the golden's codec under the checkpoint's names, as vLLM's loader iterates them."""
    for name, tensor in codec_cases.fixture_state().items():
        yield CODEC_PREFIX + name, tensor


def decoder_width() -> int:
    """The golden codec's DAC decoder width (64 for the tiny fixture)."""
    return int(codec_cases.fixture_config()["acoustic_model_config"]["decoder_hidden_size"])


@contextlib.contextmanager
def with_decoder_width(module: Any, width: int):
    """The decoder builder code2wav calls, given `width` for its written-in 1024."""
    original = module.build_higgs_audio_acoustic_decoder

    def build(tokenizer_config: dict[str, Any], device: torch.device):
        acoustic = {**tokenizer_config["acoustic_model_config"], "decoder_hidden_size": width}
        return original({**tokenizer_config, "acoustic_model_config": acoustic}, device)

    module.build_higgs_audio_acoustic_decoder = build
    try:
        yield
    finally:
        module.build_higgs_audio_acoustic_decoder = original


@contextlib.contextmanager
def no_stream_capturing():
    """torch.cuda.is_current_stream_capturing answers False (what it means without CUDA)."""
    original = torch.cuda.is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = lambda: False
    try:
        yield
    finally:
        torch.cuda.is_current_stream_capturing = original


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]}"


def classify_load_error(exc: BaseException | None) -> tuple[str | None, str]:
    """The released class loading the tiny codec: refused for its written-in 1024 channels, or not."""
    if exc is None:
        return None, "the released class loads the tiny codec"
    if "size mismatch" in str(exc) and "torch.Size([1024" in str(exc):
        return "fixed_decoder_width", "the released class builds a 1024-channel decoder: " + _error(exc)
    return "unexplained", _error(exc)


def classify_decode_error(exc: BaseException | None) -> tuple[str | None, str]:
    """The released decode on a CPU build of torch: stopped by its CUDA query, or not."""
    if exc is None:
        return None, "the released decode runs on a CPU build of torch"
    if "_cuda_isCurrentStreamCapturing" in str(exc):
        return "cuda_query", "torch.cuda.is_current_stream_capturing() raises on torch+cpu: " + _error(exc)
    return "unexplained", _error(exc)


class UpstreamCodec:
    """The code2wav class with the golden codec loaded; `decode(frames [8, T]) -> PCM` through its forward."""

    def __init__(self, checkpoint: Path):
        import importlib

        from transformers import AutoConfig

        self.module = importlib.import_module(CODE2WAV)
        self.config = AutoConfig.from_pretrained(str(checkpoint))  # vllm_omni registers the v3 config
        self.model: Any = None

    def _new(self) -> Any:
        return self.module.HiggsAudioV3Code2Wav(config=self.config).eval()

    def released_load(self) -> SubCase:
        error = None
        try:
            self._new().load_weights(golden_codec_tensors())
        except Exception as exc:  # noqa: BLE001 - the refusal is what this sub-case records
            error = exc
        difference, detail = classify_load_error(error)
        return SubCase("released_class_loads_tiny_codec", difference is None, difference, detail)

    def load_adapted(self) -> None:
        model = self._new()
        with with_decoder_width(self.module, decoder_width()):
            model.load_weights(golden_codec_tensors())
        self.model = model

    def _forward(self, frames: np.ndarray, meta: dict[str, int] | None = None) -> np.ndarray:
        flat = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.int64)).reshape(-1)  # codebook-major
        info = None if meta is None else [{"meta": meta}]  # a streamed window's trims, as stage 1 reads them
        output = self.model(input_ids=flat, positions=None, runtime_additional_information=info)
        (pcm,) = output.multimodal_outputs["model_outputs"]
        return pcm.numpy()

    def released_decode(self, frames: np.ndarray) -> SubCase:
        error = None
        try:
            self._forward(frames)
        except Exception as exc:  # noqa: BLE001
            error = exc
        difference, detail = classify_decode_error(error)
        return SubCase("released_decode_on_cpu_torch", difference is None, difference, detail)

    def decode(self, frames: np.ndarray, meta: dict[str, int] | None = None) -> np.ndarray:
        """PCM of frames [8, T]; `meta` (left_context_size, right_holdback_size) has forward trim it."""
        with no_stream_capturing():
            return self._forward(frames, meta)


def codec_check(codec: UpstreamCodec) -> Check:
    """The codec_decode check: the two released-code sub-cases, then every golden case adapted
    (`codec` is left loaded with the adapted class, for the stream check)."""
    released = codec.released_load()
    codec.load_adapted()
    first = codec_cases.codec_cases.expected_frames(codec_cases.cases()[0])  # conformance.codec's
    check = codec_cases.run(codec.decode)
    check.cases[:0] = [released, codec.released_decode(first)]
    return check
