"""Which scorers run, the floor each carries, and scoring a set of utterances.

Selection is first match: a production scorer when its environment variable names a local
folder (HIGGS_QUALITY_WHISPER_DIR, HIGGS_QUALITY_WAVLM_DIR), else the offline scorer from the
registry. A variable that names no folder is an error, not a silent fallback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from conformance.quality import model_files
from conformance.quality.case_data import Prompt, read_yaml
from conformance.quality.speaker import similarity
from conformance.quality.wer import wer

WHISPER_ENV, WAVLM_ENV = "HIGGS_QUALITY_WHISPER_DIR", "HIGGS_QUALITY_WAVLM_DIR"


@dataclass(frozen=True)
class Floor:
    bound: float
    lower_is_better: bool  # WER: score <= bound passes; SIM: score >= bound passes

    def passes(self, score: float) -> bool:
        return score <= self.bound if self.lower_is_better else score >= self.bound

    def __str__(self) -> str:
        return f"{'<=' if self.lower_is_better else '>='} {self.bound:g}"


@dataclass(frozen=True)
class ScorerSpec:
    id: str
    metric: str  # "wer" or "sim"
    floor: Floor
    per_utterance_sd: float
    env: str | None  # the variable naming a production folder; None for registry scorers
    model_sha256: str | None


def _spec(entry: dict) -> ScorerSpec:
    floor = entry["floor"]
    lower = "max" in floor
    source = entry["source"]
    return ScorerSpec(entry["id"], entry["metric"], Floor(float(floor["max" if lower else "min"]), lower),
                      float(entry["per_utterance_sd"]), source.get("env") if isinstance(source, dict) else None,
                      entry.get("model_sha256"))


@lru_cache(maxsize=1)
def all_specs() -> dict[str, ScorerSpec]:
    return {e["id"]: _spec(e) for e in read_yaml("floors")["scorers"]}


def _production_dir(env: str) -> Path | None:
    value = os.environ.get(env)
    if not value:
        return None
    if not Path(value).is_dir():
        raise model_files.ScorerModelError(f"{env}={value} is not a folder")
    return Path(value)


def active_spec(metric: str) -> ScorerSpec:
    """The scorer of `metric` in use: the production one when its variable is set."""
    candidates = [s for s in all_specs().values() if s.metric == metric]
    production = [s for s in candidates if s.env and _production_dir(s.env)]
    return (production or [s for s in candidates if not s.env])[0]


@lru_cache(maxsize=None)
def load(spec_id: str):
    """The loaded model of a scorer (hash-checked for registry scorers)."""
    from conformance.quality.asr import WhisperASR
    from conformance.quality.speaker import ResemblyzerSpeaker, WavLMSpeaker

    spec = all_specs()[spec_id]
    if spec.id == "whisper_base":
        return WhisperASR(model_files.whisper_base_dir(spec.model_sha256), spec.id)
    if spec.id == "resemblyzer":
        return ResemblyzerSpeaker(model_files.resemblyzer_weights(spec.model_sha256), spec.id)
    if spec.metric == "wer":
        return WhisperASR(_production_dir(spec.env), spec.id, production=True)
    return WavLMSpeaker(_production_dir(spec.env), spec.id)


def wer_scores(spec: ScorerSpec, prompts: list[Prompt], audios: list[np.ndarray]) -> list[float]:
    """WER of each utterance: the transcript of its audio against its text."""
    asr = load(spec.id)
    return [wer(p.text, asr.transcribe(a)) for p, a in zip(prompts, audios, strict=True)]


def sim_scores(spec: ScorerSpec, prompts: list[Prompt], audios: list[np.ndarray], references) -> list[float]:
    """SIM of each voice-clone utterance: its audio against its reference clip
    (`references(clip_id)` gives the clip's audio)."""
    model = load(spec.id)
    return [similarity(model, a, references(p.prompt_wav)) for p, a in zip(prompts, audios, strict=True)]
