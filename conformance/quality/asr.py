"""Speech recognition for WER: Whisper through faster-whisper (CTranslate2, int8 on a CPU).

Offline scorer: Whisper base from the registry (model_files.whisper_base_dir). Production scorer:
a faster-whisper folder of Whisper large-v3 (e.g. a CTranslate2 conversion of
openai/whisper-large-v3) named by HIGGS_QUALITY_WHISPER_DIR. Decoding is fixed: English, beam 5,
temperature 0 only (no fallback sampling), no conditioning on previous text, so a transcript
depends on the audio alone and the same audio always gives the same words.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from conformance.quality import SAMPLE_RATE


class WhisperASR:
    def __init__(self, model_dir: Path, name: str, production: bool = False):
        from faster_whisper import WhisperModel

        self.name = name
        self.model_dir = Path(model_dir)
        cuda = production and _has_cuda()  # Whisper base stays on the CPU: same numbers everywhere
        self.model = WhisperModel(
            str(model_dir), device="cuda" if cuda else "cpu", compute_type="float16" if cuda else "int8",
            cpu_threads=min(4, os.cpu_count() or 1),
        )

    def transcribe(self, audio: np.ndarray) -> str:
        """English transcript of 16 kHz mono float32 audio ("" when nothing is recognised)."""
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        if len(audio) < SAMPLE_RATE // 10:
            return ""
        segments, _ = self.model.transcribe(
            audio, language="en", beam_size=5, temperature=0.0, condition_on_previous_text=False,
            vad_filter=False, without_timestamps=True,
        )
        return " ".join(segment.text.strip() for segment in segments).strip()


def _has_cuda() -> bool:
    try:
        import ctranslate2
    except ImportError:
        return False
    return ctranslate2.get_cuda_device_count() > 0
