"""Check that the quality checks catch planted defects (a small mutation run).

    python -m conformance.mutations.quality [--baseline] [--list] [INDEX ...]

The defects of issue #9: the WER normalisation switched off, speaker similarity computed between
a clip and itself, a floor compared the wrong way, and a scorer model file whose hash differs from
the pinned one (here the pin moved, which is the same mismatch seen from the other side). Each
is planted in a copy of the tree and must turn the named selection red: the calibration controls
of conformance/quality/test_quality.py (about a minute each with Whisper base on a CPU), the unit tests of
tests/test_quality_units.py, and the dummy-weight negative control (an engine boot, about a minute).
The mechanics live in conformance/mutations/run.py.
"""

from __future__ import annotations

import sys

from conformance.mutations.run import Mutation, main, mutations_from_table

WER, SCORERS, FLOORS = "conformance/quality/wer.py", "conformance/quality/scorers.py", "conformance/cases/quality/floors.yaml"
QUALITY = "conformance/quality/test_quality.py"
CLEAN = (f"{QUALITY}::test_wer_control[clean_speech]",)

# (name, file, old text, new text, pytest arguments that must fail)
MUTATIONS: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    ("WER normalisation off (unit test)", WER,
     "    ref, hyp = normalise(reference), normalise(hypothesis)\n",
     "    ref, hyp = reference, hypothesis\n", ("tests/test_quality_units.py::test_hello_world_scores_zero",)),
    ("WER normalisation off (clean-speech control)", WER,
     "    ref, hyp = normalise(reference), normalise(hypothesis)\n",
     "    ref, hyp = reference, hypothesis\n", CLEAN),
    ("SIM between a clip and itself (other-voice control)", SCORERS,
     "similarity(model, a, references(p.prompt_wav))",
     "similarity(model, a, a)", (f"{QUALITY}::test_sim_control[other_voice]",)),
    ("SIM between a clip and itself (dummy-weight negative control)", SCORERS,
     "similarity(model, a, references(p.prompt_wav))",
     "similarity(model, a, a)", (QUALITY, "-k", "test_dummy_audio_fails_the_floors and v1")),
    ("floor compared the wrong way", SCORERS,
     "return score <= self.bound if self.lower_is_better else score >= self.bound",
     "return score >= self.bound if self.lower_is_better else score <= self.bound", CLEAN),
    ("Whisper model file hash differs from the pin", FLOORS,
     "model_sha256: 905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
     "model_sha256: 905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a58", CLEAN),
    ("Resemblyzer model file hash differs from the pin", FLOORS,
     "model_sha256: 39373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e",
     "model_sha256: 49373b86598fa3da9fcddee6142382efe09777e8d37dc9c0561f41f0070f134e",
     (f"{QUALITY}::test_sim_control[same_voice]",)),
]


def mutations() -> list[Mutation]:
    return mutations_from_table(MUTATIONS)


if __name__ == "__main__":
    raise SystemExit(main(mutations(), sys.argv[1:], prefix="mutate_quality_"))
