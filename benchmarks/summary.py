"""Figures derived from the phases' records, and the terminal table.

- ratios: the talker's ms per decode step over the bare backbone's, per (profile, sampling,
  concurrency), only where both engines ran under the same profile (the same engine settings);
- backbone bound: the audio seconds per second the bare backbone's greedy step at concurrency c
  would give if every step made one frame for each of c streams (c x frame seconds / step time);
  no talker stream can go faster with the same engine settings.
The table prints each figure as its median over the rounds with the rounds' min-max (spread.py).
"""

from __future__ import annotations

from benchmarks.spread import SPLIT


def step_ratios(records: list[dict]) -> list[dict]:
    bare = {r["profile"]: {(lvl["sampling"], lvl["concurrency"]): lvl for lvl in r["engine"]}
            for r in records if r["kind"] == "bare"}
    ratios = []
    for record in records:
        if record["kind"] != "talker":
            continue
        for lvl in record["engine"]:
            twin = bare.get(record["profile"], {}).get((lvl["sampling"], lvl["concurrency"]))
            if twin and twin["ms_per_step"]:
                ratios.append({"profile": record["profile"], "runner": record["runner"], "sampling": lvl["sampling"],
                               "concurrency": lvl["concurrency"], "talker_ms_per_step": lvl["ms_per_step"],
                               "bare_ms_per_step": twin["ms_per_step"],
                               "ratio": lvl["ms_per_step"] / twin["ms_per_step"],
                               "spread": {"talker_ms_per_step": lvl["spread"]["ms_per_step"],
                                          "bare_ms_per_step": twin["spread"]["ms_per_step"]}})
    return ratios


def backbone_bound(records: list[dict], frame_s: float) -> list[dict]:
    return [
        {"profile": r["profile"], "runner": r["runner"], "concurrency": lvl["concurrency"],
         "bare_ms_per_step": lvl["ms_per_step"],
         "audio_s_per_s": lvl["concurrency"] * frame_s / (lvl["ms_per_step"] / 1000)}
        for r in records if r["kind"] == "bare"
        for lvl in sorted(r["engine"], key=lambda lvl: lvl["concurrency"]) if lvl["sampling"] == "greedy"
    ]


def bound_for(results: dict, profile: str, runner: str | None) -> dict[int, float]:
    """Concurrency -> bound for an end-to-end profile: its own bare phase, else one of its runner."""
    bounds = results["backbone_bound"]
    mine = [b for b in bounds if b["profile"] == profile] or [b for b in bounds if b["runner"] == runner]
    first = mine[0]["profile"] if mine else None
    return {b["concurrency"]: b["audio_s_per_s"] for b in mine if b["profile"] == first}


def table(results: dict) -> str:
    lines = [f"{results['device']}, vLLM {results['vllm_version']}, {results['settings']['size']} dummy checkpoint"]
    talkers = [r for r in results["phases"] if r["kind"] == "talker" and r["e2e"]]
    if talkers:
        lines += ["", f"end to end: the median of {results['settings']['rounds']} rounds (min-max over the rounds)",
                  f"{'profile':22} {'runner':6} {'c':>3} {'TTFA ms':>15} {'RTF':>21} {'audio s/s':>18} {'bound':>7}"]
        for r in talkers:
            bound = bound_for(results, r["profile"], r["runner"])
            for lvl in r["e2e"]:
                c, spread = lvl["concurrency"], lvl["spread"]
                b = f"{bound[c]:7.1f}" if c in bound else f"{'-':>7}"
                lines.append(f"{r['profile']:22} {r['runner']:6} {c:>3} "
                             f"{_ranged(lvl['ttfa_ms_median'], spread['ttfa_ms'], '.0f'):>15} "
                             f"{_ranged(lvl['rtf_median'], spread['rtf'], '.3f'):>21} "
                             f"{_ranged(lvl['audio_s_per_s'], spread['audio_s_per_s'], '.1f'):>18} {b}")
        lines += ["", "TTFA split, ms: the split of the median TTFA (each part's min-max over the rounds)",
                  f"{'profile':22} {'runner':6} {'c':>3} " + " ".join(f"{part.replace('_', ' '):>15}" for part in SPLIT)
                  + f" {'TTFA':>6}"]
        for r in talkers:
            for lvl in r["e2e"]:
                parts = " ".join(f"{_ranged(lvl['split_ms'][part], lvl['spread']['split_ms'][part], '.0f'):>15}"
                                 for part in SPLIT)
                lines.append(f"{r['profile']:22} {r['runner']:6} {lvl['concurrency']:>3} {parts} "
                             f"{lvl['ttfa_ms_median']:>6.0f}")
    if results["ratios"]:
        lines += ["", f"engine only: ms per step, the median of {results['settings']['engine_repeats']} timed pairs "
                      "(min-max)",
                  f"{'profile':22} {'runner':6} {'sampling':8} {'c':>3} {'talker ms':>19} {'bare ms':>19} {'ratio':>6}"]
        for x in results["ratios"]:
            spread = x["spread"]
            lines.append(f"{x['profile']:22} {x['runner']:6} {x['sampling']:8} {x['concurrency']:>3} "
                         f"{_ranged(x['talker_ms_per_step'], spread['talker_ms_per_step'], '.2f'):>19} "
                         f"{_ranged(x['bare_ms_per_step'], spread['bare_ms_per_step'], '.2f'):>19} {x['ratio']:>6.2f}")
    lines.append("")
    for r in results["phases"]:
        lines.append(f"{r['name']:28} {r['status']:8} " + (r["message"] or f"boot {r.get('boot_s', 0):.0f} s, "
                                                                 f"phase {r.get('wall_s', 0):.0f} s"))
    return "\n".join(lines)


def _ranged(value: float, spread: list[float], fmt: str) -> str:
    """"219 (210-230)": a median and its min-max."""
    low, high = spread
    return f"{value:{fmt}} ({low:{fmt}}-{high:{fmt}})"
