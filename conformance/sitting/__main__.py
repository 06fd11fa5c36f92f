"""Run a GPU sitting from its plan (docs/sitting.md).

    python -m conformance.sitting PLAN.yaml [--results DIR] [--pack FILE.tar.gz] [--budget-s S]
    python -m conformance.sitting PLAN.yaml --dry-run       # the commands and the budget's arithmetic
    python -m conformance.sitting PLAN.yaml --stage-only    # a staging call: the carried chunks moved into place

Every step runs in the working folder (the checkout). The results folder (default ~/sittings/PLAN-<UTC time>)
gets results.json, RESULTS.md and each step's log; --pack writes it as one .tar.gz too (on the device:
--pack $OUT/NAME.tar.gz). RESULTS.md is printed at the end.
Exit status: 0 when every step ran ok; 1 when any failed or was skipped or not run; 2 for a plan refused
before anything ran."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from pathlib import Path

from conformance.sitting import bundles, dry_run
from conformance.sitting.interrupts import interruptible
from conformance.sitting.plan import PlanError, load
from conformance.sitting.results import OK, pack
from conformance.sitting.run import Sitting


def default_folder(plan_path: Path) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path.home() / "sittings" / f"{plan_path.stem}-{stamp}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.sitting", description=__doc__.splitlines()[0])
    p.add_argument("plan", type=Path)
    p.add_argument("--results", type=Path, help="the results folder (new or empty; default ~/sittings/PLAN-<time>)")
    p.add_argument("--pack", type=Path, metavar="FILE", help="also write the results folder as this .tar.gz")
    p.add_argument("--budget-s", type=float, help="instead of the plan's budget_s")
    p.add_argument("--dry-run", action="store_true", help="print the commands and the budget's arithmetic; run nothing")
    p.add_argument("--stage-only", action="store_true",
                   help="move each bundle's carried chunks into place; run nothing")
    args = p.parse_args(argv)
    repo = Path.cwd().resolve()
    try:
        plan = load(args.plan, repo)
        if args.budget_s is not None:
            if args.budget_s <= plan.reserve_s:
                raise PlanError(f"--budget-s {args.budget_s:g} leaves nothing beyond reserve_s ({plan.reserve_s:g})")
            plan = dataclasses.replace(plan, budget_s=args.budget_s)
    except PlanError as error:
        print(f"sitting: {error}", file=sys.stderr)
        return 2
    folder = (args.results or default_folder(args.plan)).expanduser().resolve()
    if args.dry_run:
        print(dry_run.describe(plan, repo, folder), end="")
        return 0
    if args.stage_only:
        for bundle in plan.bundles:
            moved = bundles.stage_incoming(bundle)
            print(f"bundle.{bundle.name}: {moved} files moved in; {bundle.source} holds "
                  f"{sum(1 for f in bundle.source.glob('*') if f.is_file()) if bundle.source.is_dir() else 0} files")
        return 0
    if folder.exists() and any(folder.iterdir()):
        print(f"sitting: {folder} holds files already: name a new or empty --results folder", file=sys.stderr)
        return 2
    with interruptible() as interrupts:
        sitting = Sitting(plan, folder, repo, interrupts=interrupts)
        try:
            results = sitting.run()
        finally:
            with interrupts.shield():
                if args.pack:
                    print(f"sitting: results packed into {pack(folder, args.pack.expanduser())}")
    print(results.markdown(), end="")
    return 0 if results.counts()[OK] == len(results.records) else 1


if __name__ == "__main__":
    sys.exit(main())
