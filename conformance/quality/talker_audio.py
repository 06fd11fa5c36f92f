"""Prompt set -> talker -> codec -> 16 kHz audio: the one module of this package that imports
the rest of the project (engine pool, dummy checkpoints, speech API, codec).

Voice-clone prompts give the talker their reference clip's audio; the checkpoint's bundled audio
tokenizer encodes it (reference/codec/encoder.py), with dummy weights and real ones alike.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

from conformance.quality import SAMPLE_RATE, prompt_set
from conformance.quality.case_data import Prompt


def dummy_checkpoint() -> Path:
    from higgs_dummy.cache import cached_checkpoint

    return cached_checkpoint("tiny", 0)


def requests(prompts: list[Prompt], mode: dict) -> list:
    """SpeechRequests of the prompts; a voice-clone prompt's reference is its clip's audio, which the
    checkpoint's bundled audio tokenizer encodes. Each prompt is seeded by its position, so every
    runner samples the same streams."""
    from reference.speech import SpeechRequest

    out = []
    for i, p in enumerate(prompts):
        sampling = {**mode["sampling"], "seed": i} if mode["sampling"].get("temperature", 0) > 0 else dict(mode["sampling"])
        audio = prompt_set.clip_audio(p.prompt_wav) if p.voice_clone else None
        out.append(SpeechRequest(text=p.text, ref_audio=audio, ref_sample_rate=SAMPLE_RATE,
                                 ref_text=p.prompt_text or None, sampling=sampling))
    return out


def synthesise(pool, runner: str, extra_args: dict, checkpoint: Path, prompts: list[Prompt],
               mode: dict) -> tuple[list[np.ndarray], list]:
    """Audio (16 kHz float32) of every prompt on one runner, and the delay-pattern rows it came from."""
    import torch

    from reference.codec.model import load_codec

    api = pool.get(runner, {**mode["engine_args"], **extra_args}, checkpoint=checkpoint)
    codec = load_codec(checkpoint)
    results = api.generate(requests(prompts, mode))
    audios = []
    with torch.no_grad():
        for result in results:
            pcm = codec.decode(result.frames).float().cpu().numpy()  # 24 kHz
            audios.append(resample_poly(pcm, 2, 3).astype(np.float32))
    return audios, [r.rows for r in results]
