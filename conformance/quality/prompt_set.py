"""The prompt set with its reference clips, and the real-speech stand-ins of the controls.

Real speech of a prompt is espeak-ng saying the prompt's text in the prompt's voice: the voice of
its reference clip for voice clone, the first voice of clips.yaml for zero-shot.

    python -m conformance.quality.prompt_set DIR   # writes the reference clips as 24 kHz WAVs
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

import numpy as np

from conformance.quality import SAMPLE_RATE, clips
from conformance.quality.case_data import Prompt, read_prompt_list, read_yaml


@lru_cache(maxsize=1)
def clip_table() -> dict:
    doc = read_yaml("clips")
    voices = {v["id"]: v for v in doc["voices"]}
    table = {"speed": doc["speed"], "pitch": doc["pitch"], "voices": voices, "clips": {}}
    for clip in doc["clips"]:
        if clip["voice"] not in voices:
            raise ValueError(f"clips.yaml: clip {clip['id']} names unknown voice {clip['voice']!r}")
        table["clips"][clip["id"]] = clip
    return table


def prompts() -> list[Prompt]:
    table = clip_table()
    listed = read_prompt_list()
    for p in listed:
        if p.voice_clone:
            clip = table["clips"].get(p.prompt_wav)
            if clip is None:
                raise ValueError(f"prompts.lst: {p.utt} names unknown clip {p.prompt_wav!r}")
            if clip["text"] != p.prompt_text:
                raise ValueError(f"prompts.lst: {p.utt}: prompt_text differs from clip {clip['id']}'s text")
    return listed


def speak(voice_id: str, text: str) -> np.ndarray:
    table = clip_table()
    return clips.synthesise(table["voices"][voice_id]["voice"], text, table["speed"], table["pitch"])


def clip_audio(clip_id: str) -> np.ndarray:
    clip = clip_table()["clips"][clip_id]
    return speak(clip["voice"], clip["text"])


def prompt_voice(prompt: Prompt) -> str:
    if prompt.voice_clone:
        return clip_table()["clips"][prompt.prompt_wav]["voice"]
    return next(iter(clip_table()["voices"]))


def other_voice(voice_id: str) -> str:
    return next(v for v in clip_table()["voices"] if v != voice_id)


def real_speech(prompt: Prompt, voice: str = "same") -> np.ndarray:
    """The prompt's text spoken by its own voice (`same`) or by another voice (`other`)."""
    own = prompt_voice(prompt)
    return speak(own if voice == "same" else other_voice(own), prompt.text)


def export_clips(folder: Path) -> None:
    from scipy.io import wavfile
    from scipy.signal import resample_poly

    folder.mkdir(parents=True, exist_ok=True)
    for clip_id in clip_table()["clips"]:
        audio = resample_poly(clip_audio(clip_id), 3, 2)  # 16 -> 24 kHz, the codec's rate
        wavfile.write(folder / f"{clip_id}.wav", SAMPLE_RATE * 3 // 2, (np.clip(audio, -1, 1) * 32767).astype(np.int16))
        print(folder / f"{clip_id}.wav")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m conformance.quality.prompt_set DIR")
    export_clips(Path(sys.argv[1]))
