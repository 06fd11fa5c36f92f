"""A small mutation runner: does a pytest selection fail when one planted defect is in the tree?

Shared by the per-area mutation modules (conformance/mutations/<area>.py); `python -m
conformance.mutations` runs every area (conformance/mutations/__main__.py).
A mutation is one textual edit of one file: `old` must occur exactly once in it (else the mutation
no longer applies: the code moved and the list has to follow). For each mutation the runner copies
the repository to a temporary directory, applies the edit there, runs `python -m pytest` on the
mutation's selection with that copy first on PYTHONPATH, and reports

    RED                     the selection failed: the defect was caught;
    GREEN (survived)        the selection passed: the tests miss the defect;
    NO LONGER APPLIES       `old` matched 0 or several times;
    NO TESTS RAN / PYTEST ERROR   pytest found nothing to run (exit 5) or failed to start (3, 4).

The exit status is 1 if any mutation is not RED. `--baseline` first runs every distinct selection on
an unmutated copy, which must pass: a RED is only evidence when the same tests are green without
the defect. The modules are not collected by pytest (their names do not start with `test_`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What the copy leaves out: version control, caches, and the device bundle (hundreds of MB). The
# dummy checkpoints under .cache/ travel, so the engine checks in the copy need not rewrite them.
COPY_IGNORE = (".git", "__pycache__", ".device-bundle", ".tox")

# pytest exit codes (pytest.ExitCode): 1 tests failed, 2 interrupted (e.g. an import error while
# collecting, which a syntax-breaking mutation causes), 5 nothing collected.
_CAUGHT = {1, 2}
_NO_TESTS = 5


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str
    pytest_args: tuple[str, ...]  # test paths, node ids, -k / --deselect options


def mutations_from_table(rows) -> list[Mutation]:
    """Mutations from rows of (name, file, old text, new text, pytest arguments that must fail)."""
    return [Mutation(name, path, old, new, tuple(args)) for name, path, old, new, args in rows]


@dataclass(frozen=True)
class Outcome:
    verdict: str  # "RED", "GREEN", "STALE", "NO TESTS", "PYTEST ERROR"
    detail: str  # the first FAILED/ERROR line of the pytest run, or why it did not run
    seconds: float


def copy_tree(dest: Path) -> Path:
    tree = dest / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*COPY_IGNORE))
    return tree


def apply(tree: Path, path: str, old: str, new: str) -> int:
    """Applies the edit in `tree` when `old` occurs exactly once; returns the count of matches."""
    target = tree / path
    text = target.read_text()
    matches = text.count(old)
    if matches == 1:
        target.write_text(text.replace(old, new))
    return matches


def run_pytest(tree: Path, pytest_args: Sequence[str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *pytest_args]
    # The copy first; the rest of the caller's path stays (on the GPU machine vLLM lives there).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)


def _first_failure(result: subprocess.CompletedProcess) -> str:
    """The first FAILED/ERROR summary line, with the first `E ` line of the report: what broke."""
    lines = result.stdout.splitlines()
    first = next((ln for ln in lines if ln.startswith(("FAILED", "ERROR"))), "")
    error = next((ln[1:].strip() for ln in lines if ln.startswith("E ") and ln[1:].strip()), "")
    if first and error and " - " not in first:
        first = f"{first} [{error[:160]}]"
    return first


def _last_line(result: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (result.stdout + result.stderr).splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _classify(result: subprocess.CompletedProcess) -> tuple[str, str]:
    if result.returncode == 0:
        return "GREEN", ""
    if result.returncode in _CAUGHT:
        return "RED", _first_failure(result) or _last_line(result)
    if result.returncode == _NO_TESTS:
        return "NO TESTS", "the selection matched no test"
    return "PYTEST ERROR", f"pytest exit {result.returncode}: {_last_line(result)}"


def run_one(mutation: Mutation, prefix: str) -> Outcome:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        tree = copy_tree(Path(tmp))
        matches = apply(tree, mutation.path, mutation.old, mutation.new)
        if matches != 1:
            return Outcome("STALE", f"{matches} matches in {mutation.path}", time.monotonic() - started)
        verdict, detail = _classify(run_pytest(tree, mutation.pytest_args))
    return Outcome(verdict, detail, time.monotonic() - started)


def baseline(selections: Sequence[tuple[str, ...]], prefix: str) -> list[tuple[str, ...]]:
    """Runs each selection once on an unmutated copy; returns those that did not pass."""
    failing = []
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        tree = copy_tree(Path(tmp))
        for args in selections:
            started = time.monotonic()
            result = run_pytest(tree, args)
            ok = result.returncode == 0
            note = "" if ok else f" {_first_failure(result) or _last_line(result)}"
            print(f"[baseline] {' '.join(args)}: {'pass' if ok else f'exit {result.returncode}'}"
                  f" ({time.monotonic() - started:.0f} s){note}", flush=True)
            if not ok:
                failing.append(args)
    return failing


_LABELS = {
    "RED": "RED",
    "GREEN": "GREEN (survived)",
    "STALE": "NO LONGER APPLIES",
    "NO TESTS": "NO TESTS RAN",
    "PYTEST ERROR": "PYTEST ERROR",
}


def run_area(mutations: Sequence[Mutation], indices: Sequence[int] = (), *, prefix: str = "mutate_",
             check_baseline: bool = False, jobs: int = 1) -> tuple[list[str], list[str]]:
    """Runs the chosen mutations (all when `indices` is empty), `jobs` at a time: (the names caught,
    the names missed: survived, stale, or not run). Raises ValueError for an unknown index or a
    baseline that fails."""
    chosen = [(i, m) for i, m in enumerate(mutations) if not indices or i in indices]
    unknown = sorted(set(indices) - set(range(len(mutations))))
    if unknown:
        raise ValueError(f"no mutation with index {unknown} (0 .. {len(mutations) - 1})")
    started = time.monotonic()
    if check_baseline:
        selections = list(dict.fromkeys(m.pytest_args for _, m in chosen))
        if baseline(selections, prefix):
            raise ValueError("the unmutated tree fails a selection: the mutation results would prove nothing")
    caught, problems = [], []
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each mutation is its own pytest process
        outcomes = pool.map(lambda chosen_one: run_one(chosen_one[1], prefix), chosen)
        for (i, mutation), outcome in zip(chosen, outcomes):
            _report(i, mutation, outcome)
            (caught if outcome.verdict == "RED" else problems).append(mutation.name)
    print(f"survived or stale: {problems or 'none'} ({len(chosen)} mutations, {time.monotonic() - started:.0f} s)")
    return caught, problems


def run_mutations(mutations: Sequence[Mutation], indices: Sequence[int] = (), *, prefix: str = "mutate_",
                  check_baseline: bool = False, jobs: int = 1) -> int:
    """run_area as an exit status: 0 when every chosen mutation is caught."""
    try:
        _, problems = run_area(mutations, indices, prefix=prefix, check_baseline=check_baseline, jobs=jobs)
    except ValueError as error:
        print(error)
        return 1
    return 1 if problems else 0


def _report(i: int, mutation: Mutation, outcome: Outcome) -> None:
    label = _LABELS[outcome.verdict]
    if outcome.verdict == "STALE":
        print(f"[{i}] {mutation.name}: {label} ({outcome.detail})", flush=True)
    else:
        print(f"[{i}] {mutation.name}: {label} ({outcome.seconds:.0f} s) {outcome.detail}".rstrip(), flush=True)


def main(mutations: Sequence[Mutation], argv: Sequence[str], *, prefix: str) -> int:
    """The command line of a mutation module: `[--baseline] [--list] [--jobs N] [INDEX ...]`."""
    args = list(argv)
    if "-h" in args or "--help" in args:
        print("usage: [--baseline] [--list] [--jobs N] [INDEX ...]\n  --baseline  first run every selection on an "
              "unmutated copy (must pass)\n  --list      the planted defects, by index; nothing runs\n"
              "  --jobs N    N defects at a time\n  INDEX       only these defects (default: all)")
        return 0
    jobs = 1
    if "--jobs" in args:
        at = args.index("--jobs")
        jobs = int(args[at + 1])
        del args[at : at + 2]
    if "--list" in args:
        for i, m in enumerate(mutations):
            print(f"[{i}] {m.name} ({m.path}; pytest {' '.join(m.pytest_args)})")
        return 0
    check_baseline = "--baseline" in args
    args = [a for a in args if a != "--baseline"]
    bad = [a for a in args if not a.isdigit()]
    if bad:
        print(f"usage: [--baseline] [--list] [--jobs N] [INDEX ...]; not understood: {bad}")
        return 2
    return run_mutations(mutations, [int(a) for a in args], prefix=prefix, check_baseline=check_baseline, jobs=jobs)
