"""Prompt set -> talker -> codec -> 16 kHz audio: the one module of this package that imports
the rest of the project (engine pool, dummy checkpoints, speech API, codec).

Voice-clone prompts need the codec codes of their reference clip. The reference has no codec
encoder, so with dummy weights they get seeded stand-in codes (the audio is noise either way), and
with the real checkpoint they read `<clip id>.npy` (int [8, frames], encoded with the upstream
codec from the WAVs that `python -m conformance.quality.prompt_set DIR` writes) from the folder
HIGGS_QUALITY_REF_CODES names.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

from conformance.quality.case_data import Prompt

REF_CODES_ENV = "HIGGS_QUALITY_REF_CODES"
REF_CODES_SKIP = (f"voice-clone prompts on the real checkpoint need their reference codes: encode the clips "
                  f"of `python -m conformance.quality.prompt_set DIR` with the upstream codec and set "
                  f"{REF_CODES_ENV} to a folder of <clip id>.npy (int [8, frames])")


def dummy_checkpoint() -> Path:
    from higgs_dummy.cache import cached_checkpoint

    return cached_checkpoint("tiny", 0)


def stand_in_codes(clip_id: str, frames: int) -> list[list[int]]:
    """Seeded codes [8, frames] standing in for an encoded clip (dummy weights only)."""
    rng = np.random.default_rng(zlib.crc32(clip_id.encode()))
    return rng.integers(0, 1024, size=(8, frames)).tolist()


def real_codes(clip_id: str) -> list[list[int]] | None:
    folder = os.environ.get(REF_CODES_ENV)
    path = Path(folder) / f"{clip_id}.npy" if folder else None
    if path is None or not path.is_file():
        return None
    codes = np.load(path)
    if codes.ndim != 2 or codes.shape[0] != 8:
        raise ValueError(f"{path}: reference codes must be int [8, frames], got shape {codes.shape}")
    return codes.astype(np.int64).tolist()


def requests(prompts: list[Prompt], mode: dict, ref_codes) -> list:
    """SpeechRequests of the prompts; `ref_codes(clip_id)` gives a voice-clone prompt's codes.
    Each prompt is seeded by its position, so every runner samples the same streams."""
    from reference.speech import SpeechRequest

    out = []
    for i, p in enumerate(prompts):
        sampling = {**mode["sampling"], "seed": i} if mode["sampling"].get("temperature", 0) > 0 else dict(mode["sampling"])
        codes = ref_codes(p.prompt_wav) if p.voice_clone else None
        out.append(SpeechRequest(text=p.text, ref_codes=codes, ref_text=p.prompt_text or None, sampling=sampling))
    return out


def synthesise(pool, runner: str, extra_args: dict, checkpoint: Path, prompts: list[Prompt], mode: dict,
               ref_codes) -> tuple[list[np.ndarray], list]:
    """Audio (16 kHz float32) of every prompt on one runner, and the delay-pattern rows it came from."""
    import torch

    from reference.codec.model import load_codec

    api = pool.get(runner, {**mode["engine_args"], **extra_args}, checkpoint=checkpoint)
    codec = load_codec(checkpoint)
    results = api.generate(requests(prompts, mode, ref_codes))
    audios = []
    with torch.no_grad():
        for result in results:
            pcm = codec.decode(result.frames).float().cpu().numpy()  # 24 kHz
            audios.append(resample_poly(pcm, 2, 3).astype(np.float32))
    return audios, [r.rows for r in results]
