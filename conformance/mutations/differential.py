"""A planted defect that our oracle and the reference share, against the differential check.

    python -m conformance.mutations.differential --foreign-python .tox/diff-boson/bin/python

The defect: the delay of codebooks 1-7 shifted by one (codebook q lags max(q - 1, 0) steps instead
of q), in the oracle (conformance/oracles/delay_numpy.py, apply and revert) and in the reference
(reference/codec/delay_pattern.py, apply and revert) alike: one wrong reading of the format written
twice. In a copy of the tree, it runs
1. the main environment's checks that compare the reference with the oracle and with the goldens
   (this interpreter: tests/test_delay_pattern.py's oracle comparisons and round trip, and the
   codec goldens' rows cases): the pair agrees, so they pass;
2. the diff-boson adapter (--foreign-python): Boson's build_delay_pattern_mask and
   revert_delay_pattern disagree with both.
Exit 0 when 2 catches the defect (RED) and 1 passes; 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conformance.mutations.run import COPY_IGNORE, ROOT

EDITS = (
    ("conformance/oracles/delay_numpy.py", "            frame = step - q\n",
     "            frame = step - max(q - 1, 0)\n"),
    ("conformance/oracles/delay_numpy.py", "rows[t + q, q]", "rows[t + max(q - 1, 0), q]"),
    ("reference/codec/delay_pattern.py", "        rows[:q, q] = BOC\n        rows[q : q + t, q] = codes[q]\n",
     "        lag = max(q - 1, 0)\n        rows[:lag, q] = BOC\n        rows[lag : lag + t, q] = codes[q]\n"),
    ("reference/codec/delay_pattern.py", "parts = [rows[q : q + t, q] for q in range(n)]",
     "parts = [rows[max(q - 1, 0) : max(q - 1, 0) + t, q] for q in range(n)]"),
)
# The checks that compare the reference with the oracle or with the goldens (none pins the rule itself).
PAIR_CHECKS = (
    "tests/test_delay_pattern.py::test_apply_delay_matches_the_independent_numpy_statement",
    "tests/test_delay_pattern.py::test_revert_undoes_apply",
    "tests/test_delay_pattern.py::test_numpy_and_torch_agree",
    "conformance/codec/test_codec_golden.py",
    # its own planted revert defect is what that check plants, not a comparison of the pair
    "-k", "not test_a_delay_pattern_defect_fails_the_comparison",
)


def planted_copy(destination: Path) -> Path:
    copy = destination / "tree"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*COPY_IGNORE))
    for path, old, new in EDITS:
        text = (copy / path).read_text()
        if text.count(old) != 1:
            raise SystemExit(f"the planted defect no longer applies: {old!r} occurs {text.count(old)} times in {path}")
        (copy / path).write_text(text.replace(old, new))
    return copy


def run(command: list[str], tree: Path) -> int:
    print("$", " ".join(command), flush=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(command, cwd=tree, env=env, check=False).returncode


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--foreign-python", required=True, help="the diff-boson environment's python")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tree = planted_copy(Path(tmp))
        pair = run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *PAIR_CHECKS], tree)
        print(f"-> our pair checks: {'pass (oracle and reference agree)' if pair == 0 else f'exit {pair}'}")
        foreign = run([str(Path(args.foreign_python).absolute()), "-m", "conformance.differential.adapter_boson"], tree)
        print(f"-> diff-boson: {'RED (caught)' if foreign == 1 else f'exit {foreign} (not caught)'}")
    return 0 if pair == 0 and foreign == 1 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
