"""The dry run: the plan's commands as they would run (what only the sitting can know, such as a `yields`, left
as {name}), their environment, and the budget's arithmetic with every step taking its whole limit: where each
would end, and which the budget would leave out. Nothing is run, installed or written."""

from __future__ import annotations

from pathlib import Path

from conformance.sitting import commands
from conformance.sitting.budget import Budget, WorstCaseClock
from conformance.sitting.plan import Plan, Run, Server
from conformance.sitting.run import base_values, bundle_command


def _env_line(plan: Plan, step: Run | Server, values: dict[str, str], targets: dict[str, Path], repo: Path) -> str:
    env = commands.environment(plan, step, values, targets, repo, base={}, keep_unknown=True)
    return "    env: " + " ".join(f"{k}={v}" for k, v in env.items())


def describe(plan: Plan, repo: Path, folder: Path) -> str:
    values = base_values(plan, repo, folder)
    targets = {b.name: b.target for b in plan.bundles}
    lines = [f"sitting {plan.path}: budget {plan.budget_s:g} s, of which {plan.reserve_s:g} s kept for the last stops "
             f"and the results; every step runs in {repo}; results in {folder}", "", "commands:"]
    for bundle in plan.bundles:
        lines += [f"  {bundle.id}  (limit {bundle.timeout_s:g} s)", f"    {bundle_command(bundle)}"]
    for step in plan.steps:
        if isinstance(step, Server):
            server_values = values | step.values
            lines += [f"  {step.id}  (healthy within {step.boot_timeout_s:g} s at {step.health}; stop: SIGTERM to it, "
                      f"SIGKILL to its group after {step.stop_grace_s:g} s)",
                      f"    {commands.shown(step, server_values)}", _env_line(plan, step, server_values, targets, repo)]
            runs = [(r, server_values) for r in step.steps]
        else:
            runs = [(step, values)]
        for run, run_values in runs:
            run_values = run_values | {"dir": str(folder / run.id)}
            lines += [f"  {run.id}  (limit {run.timeout_s:g} s, then {run.stop_signal.name} to its group and "
                      f"SIGKILL after {run.grace_s:g} s; on failure: {run.on_failure}"
                      + (f"; yields {{{run.yields}}}" if run.yields else "") + ")",
                      f"    {commands.shown(run, run_values)}", _env_line(plan, run, run_values, targets, repo)]
    return "\n".join(lines + ["", *arithmetic(plan)]) + "\n"


def arithmetic(plan: Plan) -> list[str]:
    """Each step in turn, every one before it having taken its whole limit."""
    clock = WorstCaseClock()
    budget = Budget(plan.budget_s, plan.reserve_s, clock)
    lines = [f"budget, every step taking its whole limit ({plan.budget_s:g} s, {plan.reserve_s:g} s kept back):",
             f"  {'step':<28} {'worst s':>8} {'ends by s':>10}  verdict"]
    not_run = 0

    def row(name: str, worst: float, verdict: str) -> None:
        lines.append(f"  {name:<28} {worst:>8.0f} {clock() + (worst if verdict == 'runs' else 0):>10.0f}  {verdict}")

    def one(name: str, worst: float, commits: float = 0.0) -> bool:
        nonlocal not_run
        if budget.fits(worst + commits):
            row(name, worst, "runs")
            clock.advance(worst)
            return True
        not_run += 1
        row(name, worst, "not run: " + budget.shortfall(worst + commits))
        return False

    for bundle in plan.bundles:
        if not one(bundle.id, bundle.worst_s):
            lines.append("  (a bundle not installed stops the sitting)")
            return lines + [f"in the worst case {bundle.id} and every step after it are not run"]
    for step in plan.steps:
        if isinstance(step, Server):
            first = step.steps[0].worst_s if step.steps else 0.0
            if not one(f"{step.id} (boot)", step.boot_timeout_s, first + step.stop_grace_s):
                not_run += len(step.steps)
                lines.append(f"  ({len(step.steps)} work items of {step.id} not run with it)")
                continue
            for run in step.steps:
                one(run.id, run.worst_s, step.stop_grace_s)
            one(f"{step.id} (stop)", step.stop_grace_s)
        else:
            one(step.id, step.worst_s)
    total = len(plan.bundles) + sum(2 + len(s.steps) if isinstance(s, Server) else 1 for s in plan.steps)
    verdict = (f"in the worst case {not_run} of {total} steps {'is' if not_run == 1 else 'are'} not run" if not_run
               else "every step fits, even in the worst case")
    return lines + [f"  {'total':<28} {'':>8} {clock():>10.0f}", verdict]
