"""Every area's planted defects, then caught / missed per area; or one area with its own options.

    python -m conformance.mutations [--jobs N]            # every area this machine can run
    python -m conformance.mutations --list                # every area's defects; nothing runs
    python -m conformance.mutations AREA [ARGS...]        # one area: talker, serving, deploy, quality, gpu
                                                          #   ([--baseline] [--list] [--jobs N] [INDEX ...]),
                                                          # or differential (--foreign-python PYTHON)

Each defect is planted in a copy of the tree and must turn its selection red (conformance/mutations/run.py).
An area this machine cannot run is listed as not run, with what it needs: gpu a CUDA GPU; differential
the diff-boson environment (`tox -e diff-boson`, .tox/diff-boson/bin/python). Exit 1 when any defect
is missed (survived, stale or not run) in an area that ran; 2 on usage errors. Every area takes
minutes (the talker's about seven on a CPU); `--jobs N` runs N defects of an area at a time.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from conformance.mutations import run

PLANTED = ("talker", "serving", "deploy", "quality", "gpu")  # tables of Mutation, run by run.py
AREAS = (*PLANTED, "differential")  # differential: one defect shared by oracle and reference (its own runner)
BOSON_PYTHON = run.ROOT / ".tox" / "diff-boson" / "bin" / "python"


def area_module(area: str):
    return importlib.import_module(f"conformance.mutations.{area}")


def needs(area: str) -> str | None:
    """What this machine lacks to run `area`, or None."""
    if area == "gpu":
        from conformance.environment import has_cuda

        return None if has_cuda() else "needs a CUDA GPU (tox -e gpu's machine)"
    if area == "differential" and not BOSON_PYTHON.exists():
        return f"needs the diff-boson environment ({BOSON_PYTHON.relative_to(run.ROOT)}: tox -e diff-boson)"
    return None


def run_one_area(area: str, argv: list[str]) -> int:
    if area == "differential":
        return area_module(area).main(argv)
    return run.main(area_module(area).mutations(), argv, prefix=f"mutate_{area}_")


def list_all() -> int:
    for area in PLANTED:
        module = area_module(area)
        rows = module.mutations() if area != "gpu" else run.mutations_from_table(module.MUTATIONS)
        print(f"== {area}: {len(rows)} planted defects")
        for i, m in enumerate(rows):
            print(f"  [{i}] {m.name} ({m.path})")
    edits = area_module("differential").EDITS
    print(f"== differential: 1 planted defect ({len(edits)} edits in {sorted({p for p, _, _ in edits})})")
    return 0


def run_all(jobs: int) -> int:
    table: list[tuple[str, str]] = []
    missed_any = False
    for area in AREAS:
        lacking = needs(area)
        if lacking:
            table.append((area, f"not run: {lacking}"))
            continue
        print(f"== {area}", flush=True)
        if area == "differential":
            code = area_module(area).main(["--foreign-python", str(BOSON_PYTHON)])
            caught, missed = (["differential"], []) if code == 0 else ([], ["differential"])
        else:
            try:
                caught, missed = run.run_area(area_module(area).mutations(), prefix=f"mutate_{area}_", jobs=jobs)
            except ValueError as error:
                caught, missed = [], [str(error)]
        missed_any |= bool(missed)
        table.append((area, f"caught {len(caught)}, missed {len(missed)}" + (f": {missed}" if missed else "")))
    print("\n== planted defects per area")
    for area, line in table:
        print(f"  {area:<13} {line}")
    return 1 if missed_any else 0


def main(argv: list[str]) -> int:
    if argv and argv[0] in AREAS:
        return run_one_area(argv[0], argv[1:])
    p = argparse.ArgumentParser(prog="python -m conformance.mutations", description=__doc__.split("\n\n")[0],
                                epilog="One area: python -m conformance.mutations AREA --help (areas: "
                                       + ", ".join(AREAS) + ")")
    p.add_argument("--list", action="store_true", help="list every area's planted defects; nothing runs")
    p.add_argument("--jobs", type=int, default=1, help="defects of an area run at a time (default 1)")
    if argv and not argv[0].startswith("-"):
        p.error(f"no area {argv[0]!r}: the areas are {', '.join(AREAS)}")
    args = p.parse_args(argv)
    return list_all() if args.list else run_all(args.jobs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
