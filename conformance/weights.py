"""Which weights a run uses, dummy or real, and the refusal to start a real-weights run without them.

    python -m conformance.weights [dummy|real]      # default: $HIGGS_WEIGHTS, else dummy

Prints the weights (`dummy`, or `real: <path>, <revision or folder>`) and exits 0; with `real`,
exits 2 with a message naming HIGGS_V3_CHECKPOINT when it is unset, names no folder, or names a
folder that is not a Higgs Audio v3 checkpoint (config.json with its model type and architecture,
*.safetensors weights, a tokenizer). The tox environments `cpu-real` and `gpu-real` set
HIGGS_WEIGHTS=real and run this first (toxfile.py: before tox installs anything), as does the
pytest session (conftest.py). `python -m conformance.talker.check_checkpoint DIR` checks every fact; this
is the quick look that catches a wrong path.

Standard library only: toxfile.py runs it with tox's own interpreter, before any install.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from conformance.environment import REAL_CHECKPOINT_ENV

MODE_ENV = "HIGGS_WEIGHTS"
MODES = ("dummy", "real")
# reference/talker/config.py's, copied so that tox's interpreter needs no transformers
# (tests/test_weights.py keeps them equal).
MODEL_TYPE = "higgs_multimodal_qwen3"
ARCHITECTURE = "HiggsMultimodalQwen3ForConditionalGeneration"
REFUSED = 2
HOW = (f"set {REAL_CHECKPOINT_ENV} to a local copy of bosonai/higgs-audio-v3-tts-4b, the folder with its "
       "config.json, *.safetensors and tokenizer files (`hf download bosonai/higgs-audio-v3-tts-4b --local-dir DIR`); "
       "without it run the dummy weights: tox -e cpu-dummy (CPU) or tox -e gpu (GPU)")


def mode(value: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """`value` (pytest's --weights) if given, else $HIGGS_WEIGHTS, else dummy."""
    chosen = value or environ.get(MODE_ENV) or "dummy"
    if chosen not in MODES:
        raise ValueError(f"{MODE_ENV}={chosen!r} (or --weights): expected one of {', '.join(MODES)}")
    return chosen


def checkpoint_problem(environ: Mapping[str, str] = os.environ) -> str | None:
    """Why $HIGGS_V3_CHECKPOINT cannot serve a real-weights run, or None when it can."""
    value = environ.get(REAL_CHECKPOINT_ENV, "")
    prefix = f"real weights ({MODE_ENV}=real): "
    if not value.strip():
        return f"{prefix}{REAL_CHECKPOINT_ENV} is not set: {HOW}"
    folder = Path(value).expanduser()
    if not folder.exists():
        return f"{prefix}{REAL_CHECKPOINT_ENV}={value} does not exist: {HOW}"
    if not folder.is_dir():
        return f"{prefix}{REAL_CHECKPOINT_ENV}={value} is a file, not a checkpoint folder: {HOW}"
    config_path = folder / "config.json"
    if not config_path.is_file():
        return f"{prefix}{REAL_CHECKPOINT_ENV}={value} has no config.json, so it is not a checkpoint folder: {HOW}"
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as error:
        return f"{prefix}{config_path} does not read as JSON ({error}): {HOW}"
    model_type = config.get("model_type") if isinstance(config, dict) else None
    architectures = (config.get("architectures") if isinstance(config, dict) else None) or []
    if model_type != MODEL_TYPE or ARCHITECTURE not in architectures:
        return (f"{prefix}{REAL_CHECKPOINT_ENV}={value} is not a Higgs Audio v3 checkpoint: config.json has "
                f"model_type {model_type!r} and architectures {architectures!r} (expected {MODEL_TYPE!r} and "
                f"{ARCHITECTURE!r}): {HOW}")
    if not any(folder.glob("*.safetensors")):
        return f"{prefix}{REAL_CHECKPOINT_ENV}={value} has no *.safetensors weights (a partial download?): {HOW}"
    if not (folder / "tokenizer.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        return f"{prefix}{REAL_CHECKPOINT_ENV}={value} has no tokenizer.json or tokenizer_config.json: {HOW}"
    return None


def revision(folder: Path) -> str:
    """The checkpoint's Hugging Face revision where the folder records it, else its folder name."""
    snapshot = folder.resolve()
    if snapshot.parent.name == "snapshots":  # the Hugging Face cache: .../snapshots/<commit>/
        return f"revision {snapshot.name}"
    metadata = folder / ".cache" / "huggingface" / "download" / "config.json.metadata"  # `hf download --local-dir`
    if metadata.is_file():
        commit = metadata.read_text().split("\n", 1)[0].strip()
        if commit:
            return f"revision {commit}"
    return f"folder {snapshot.name}"


def describe(chosen: str, environ: Mapping[str, str] = os.environ) -> str:
    """`dummy`, or `real: <path>, <revision or folder name>` (a verdict's and a report's `weights`)."""
    if chosen == "dummy":
        return "dummy"
    folder = Path(environ[REAL_CHECKPOINT_ENV]).expanduser()
    return f"real: {folder.resolve()}, {revision(folder)}"


def identity(description: str) -> tuple[str, str]:
    """A `weights` field as (kind, checkpoint): the path is left out, it differs between machines."""
    if not description.startswith("real:"):
        return ("dummy", "")
    return ("real", description.rsplit(", ", 1)[-1])


def ran_real_check(report) -> bool:
    """A pytest report of a real-weights check whose body ran (passed, failed or xfailed), not skipped."""
    if report.when != "call" or "real_weights" not in report.keywords:
        return False
    return not report.skipped or hasattr(report, "wasxfail")


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python -m conformance.weights [dummy|real]", file=sys.stderr)
        return REFUSED
    try:
        chosen = mode(argv[0] if argv else None)
    except ValueError as error:
        print(f"weights: {error}", file=sys.stderr)
        return REFUSED
    if chosen == "real" and (problem := checkpoint_problem()):
        print(f"refusing to start: {problem}", file=sys.stderr)
        return REFUSED
    print(f"weights: {describe(chosen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
