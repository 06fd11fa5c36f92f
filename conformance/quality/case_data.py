"""The quality case files (conformance/cases/quality/): the one place that reads them.

`read_yaml` reads them through conformance/case_files.py (validated against
conformance/schemas/quality/<stem>.json). `read_prompt_list` parses the
seed-tts-eval style prompt set: `utt|prompt_text|prompt_wav|text`, one prompt a line, `#`
comments; prompt_wav names a clip of clips.yaml, empty for zero-shot.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import case_files

CASES_DIR = Path(__file__).resolve().parents[1] / "cases" / "quality"


def read_yaml(stem: str) -> dict[str, Any]:
    """cases/quality/<stem>.yaml, validated by the suite's one case-file loader."""
    return case_files.load(f"quality/{stem}")


@dataclass(frozen=True)
class Prompt:
    utt: str
    prompt_text: str  # transcript of the reference clip ("" for zero-shot)
    prompt_wav: str  # clip id of clips.yaml ("" for zero-shot)
    text: str  # what the talker says

    @property
    def voice_clone(self) -> bool:
        return bool(self.prompt_wav)


def read_prompt_list(name: str = "prompts.lst") -> list[Prompt]:
    prompts = []
    for number, line in enumerate((CASES_DIR / name).read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 4 or not fields[0] or not fields[3]:
            raise ValueError(f"{name}:{number}: expected utt|prompt_text|prompt_wav|text, got {line!r}")
        if bool(fields[1]) != bool(fields[2]):
            raise ValueError(f"{name}:{number}: prompt_text and prompt_wav go together (both or neither)")
        prompts.append(Prompt(*fields))
    utts = [p.utt for p in prompts]
    if len(utts) != len(set(utts)):
        raise ValueError(f"{name}: utterance ids repeat")
    return prompts
