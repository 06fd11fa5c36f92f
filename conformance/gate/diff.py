"""The upgrade gate's comparison of two verdicts (conformance/gate/run.py): a candidate vLLM
against the baseline of the pinned one. Plain Python (no vLLM, no torch).

Red (the candidate regresses) when a check fails or errors on the candidate that did not on the
baseline (a check the baseline does not have counts too), or when a figure is out of place
(conformance/figures.py): a bounded figure on the wrong side of its bound, a measured figure
further from the baseline's value than the baseline's tolerance. Reported without turning red: checks that pass
now and failed before, checks that passed and are skipped now (coverage lost), checks and figures
present in only one run.

Both verdicts name their weights (dummy, or a real checkpoint's revision or folder; format 1
verdicts predate the field and ran dummy weights). When they differ the diff compares different
models: it is still printed, under a warning, and the gate is red. A real-weights candidate in
which no real-weight check ran is red too.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from pathlib import PurePosixPath

from conformance import figures
from conformance import weights as weights_mode

FAILING = ("failed", "error")
# The gate's exit codes for a verdict (gate.py): added when both hold (5: regressed and incomplete).
REGRESSED, INCOMPLETE = 1, 4


@dataclasses.dataclass
class GateDiff:
    newly_failing: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (check, reason)
    newly_passing: list[str] = dataclasses.field(default_factory=list)
    newly_skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    only_in_baseline: list[str] = dataclasses.field(default_factory=list)
    only_in_candidate: list[str] = dataclasses.field(default_factory=list)
    moved: list[tuple[str, float, float, str, str]] = dataclasses.field(default_factory=list)  # (figure, base, now, limit, unit)
    figures_missing: list[str] = dataclasses.field(default_factory=list)
    weights_differ: tuple[str, str] | None = None  # (baseline's, candidate's) when not the same weights
    no_real_checks: bool = False  # a real-weights candidate in which no real-weight check ran

    @property
    def regressed(self) -> bool:
        return bool(self.newly_failing or self.moved or self.weights_differ or self.no_real_checks)


def weights(verdict: dict) -> str:
    """The verdict's `weights`; format 1 verdicts have none and ran dummy weights."""
    return verdict.get("weights", "dummy")


def _moved(base: float, cand: float, tolerance: float) -> bool:
    if math.isinf(base) or math.isinf(cand):
        return base != cand
    return abs(cand - base) > tolerance


def diff(baseline: dict, candidate: dict) -> GateDiff:
    base_checks, cand_checks = baseline["checks"], candidate["checks"]
    d = GateDiff()
    if weights_mode.identity(weights(baseline)) != weights_mode.identity(weights(candidate)):
        d.weights_differ = (weights(baseline), weights(candidate))
    d.no_real_checks = weights(candidate).startswith("real") and not candidate.get("real_weight_checks_run")
    for check, result in sorted(cand_checks.items()):
        before = base_checks.get(check, {}).get("outcome")
        now = result["outcome"]
        if now in FAILING and before not in FAILING:
            d.newly_failing.append((check, result.get("reason", "")))
        elif now == "passed" and before in FAILING:
            d.newly_passing.append(check)
        elif now in ("skipped", "notrun") and before == "passed":
            d.newly_skipped.append((check, result.get("reason", "")))
        if before is None:
            d.only_in_candidate.append(check)
    d.only_in_baseline = sorted(set(base_checks) - set(cand_checks))
    for name, figure in sorted(baseline.get("figures", {}).items()):
        now = candidate.get("figures", {}).get(name)
        if now is None:
            d.figures_missing.append(name)
        elif figure.get("class") == "bounded":  # the baseline's bound, whatever the candidate says
            if figures.misses_bound({**figure, "value": now["value"]}):
                bound = f">= {figure['at_least']}" if "at_least" in figure else f"<= {figure['at_most']}"
                d.moved.append((name, figure["value"], now["value"], f"bound {bound}", figure.get("unit", "")))
        elif _moved(figure["value"], now["value"], figure["tolerance"]):
            d.moved.append((name, figure["value"], now["value"], f"tolerance {figure['tolerance']}",
                            figure.get("unit", "")))
    return d


def area(check: str) -> str:
    """conformance/codec/test_codec_golden.py::... -> 'codec_golden'; tests/...: 'unit tests'."""
    path = PurePosixPath(check.split("::")[0])
    if path.parts and path.parts[0] == "tests":
        return "unit tests"
    return path.stem.removeprefix("test_") or check


def area_table(verdict: dict) -> dict[str, dict[str, int]]:
    """area -> outcome -> count."""
    table: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for check, result in verdict["checks"].items():
        table[area(check)][result["outcome"]] += 1
    return {a: dict(c) for a, c in sorted(table.items())}


def _name(verdict: dict) -> str:
    return f"{verdict['platform']} vLLM {verdict['vllm']} (torch {verdict['torch']}, weights {weights(verdict)})"


def _sides(baseline: dict, candidate: dict, name: str) -> str:
    """'; talker 5.12 -> 7.86, bare 4.82 -> 5.04 ms/step': a ratio's two medians in both verdicts (gate/speed.py)."""
    before = baseline.get("figures", {}).get(name, {}).get("sides", {})
    now = candidate["figures"][name]
    after = now.get("sides", {})
    moved = [f"{side} {value} -> {after[side]}" for side, value in before.items() if side in after]
    return f"; {', '.join(moved)} {now.get('sides_unit', '')}".rstrip() if moved else ""


def render(baseline: dict, candidate: dict, d: GateDiff) -> list[str]:
    lines = [f"== upgrade gate: candidate {_name(candidate)} against baseline {_name(baseline)} =="]
    warning = []
    if d.weights_differ:
        warning.append(f"!! WEIGHTS DIFFER: baseline {d.weights_differ[0]}, candidate {d.weights_differ[1]}. The diff "
                       "below compares checks and figures of different models and proves nothing: diff against a "
                       "baseline of the same weights (--baseline).")
    if d.no_real_checks:
        warning.append("!! NO REAL-WEIGHT CHECK RAN on the candidate: a real-weights run that tested nothing of the "
                       "weights (all real_weights checks skipped or deselected).")
    lines.extend(warning)
    if candidate.get("known_differences"):
        lines.append(f"known differences (reference/compat.py): {', '.join(candidate['known_differences'])}")
    for a, counts in area_table(candidate).items():
        others = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k not in ("passed", "failed", "skipped"))
        lines.append(f"  [{a}] passed {counts.get('passed', 0)}, failed {counts.get('failed', 0)}, "
                     f"skipped {counts.get('skipped', 0)}{', ' + others if others else ''}")

    def section(title: str, items: list[str], limit: int | None = None) -> None:
        lines.append(f"{title}: {len(items)}")
        lines.extend(f"  - {item}" for item in items[:limit])
        if limit is not None and len(items) > limit:
            lines.append(f"  ... and {len(items) - limit} more (the verdict files list them all)")

    section("newly failing", [f"{c}: {r}" for c, r in d.newly_failing])
    section("newly passing", d.newly_passing)
    section("figures beyond tolerance",
            [f"{n}: {b} -> {c} {u} ({limit}){_sides(baseline, candidate, n)}" for n, b, c, limit, u in d.moved])
    section("newly skipped (coverage lost)", [f"{c}: {r}" for c, r in d.newly_skipped])
    section("checks only in the baseline", d.only_in_baseline, limit=10)
    section("checks only in the candidate", d.only_in_candidate, limit=10)
    section("figures the candidate did not measure", d.figures_missing, limit=10)
    lines.extend(warning)  # again beside the verdict line: a long diff must not bury it
    lines.append(verdict_line(candidate, d))
    return lines


def notrun(verdict: dict) -> list[str]:
    """The verdict's checks that did not run to their end (a deadline's verdict): `--rest` runs them."""
    return sorted(c for c, r in verdict["checks"].items() if r["outcome"] == "notrun")


def incomplete(verdict: dict) -> bool:
    """A verdict written before every check ran (format 3's `complete`; older verdicts are whole)."""
    return not verdict.get("complete", True) or bool(notrun(verdict))


def exit_code(candidate: dict, d: GateDiff) -> int:
    """0 green; REGRESSED, INCOMPLETE, or both added (REGRESSED + INCOMPLETE) when both hold."""
    return (REGRESSED if d.regressed else 0) + (INCOMPLETE if incomplete(candidate) else 0)


def verdict_line(candidate: dict, d: GateDiff) -> str:
    """The gate's last line: GREEN only for a complete verdict without regression; an incomplete one
    says INCOMPLETE (and RED too when what ran regresses), with how many checks are left."""
    summary = ", ".join(f"{k} {v}" for k, v in candidate["counts"].items())
    if d.weights_differ:
        red = "baseline and candidate ran different weights"
    elif d.no_real_checks:
        red = "no real-weight check ran"
    else:
        red = "the candidate regresses" if d.regressed else ""
    if not incomplete(candidate):
        return f"RED: {red} ({summary})" if red else f"GREEN: no regression ({summary})"
    left = len(notrun(candidate))
    rest = (f"{left} checks not run: `--rest VERDICT` runs them" if left
            else "the run ended before its checks were collected: run the gate again")
    if red:
        return f"RED and INCOMPLETE: {red}; {rest} ({summary})"
    return f"INCOMPLETE: no regression in what ran; {rest} ({summary})"


def matrix(verdicts: list[dict]) -> list[str]:
    """A markdown table, area x version: passed / failed / skipped counts (failed includes
    errors), then every failure and every distinct skip reason per version."""
    tables = [area_table(v) for v in verdicts]
    areas = sorted({a for t in tables for a in t})
    titles = [f"{v['platform']} {v['vllm']}" + (" real" if weights(v).startswith("real") else "") for v in verdicts]
    lines = ["| area | " + " | ".join(titles) + " |",
             "|---" * (len(verdicts) + 1) + "|"]
    for a in areas:
        cells = []
        for t in tables:
            c = t.get(a, {})
            failed = sum(c.get(k, 0) for k in FAILING)
            cell = f"{c.get('passed', 0)} / {failed} / {c.get('skipped', 0)}"
            cells.append(f"**{cell}**" if failed else cell)
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    for v in verdicts:
        fails = sorted(f"{c}: {r.get('reason', '')}" for c, r in v["checks"].items() if r["outcome"] in FAILING)
        skips: dict[str, int] = defaultdict(int)
        for c, r in v["checks"].items():
            if r["outcome"] == "skipped":
                skips[f"[{area(c)}] {r.get('reason', '')}"] += 1
        lines.append(f"\n{v['platform']} {v['vllm']} (torch {v['torch']}, weights {weights(v)}, {v['seconds']} s): "
                     + ", ".join(f"{k} {n}" for k, n in v["counts"].items()))
        lines.extend(f"- FAILED {f}" for f in fails)
        lines.extend(f"- skipped ({n}): {s}" for s, n in sorted(skips.items()))
    return lines
