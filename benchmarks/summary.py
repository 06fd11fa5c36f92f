"""Figures derived from the phases' records, and the terminal table.

- ratios: the talker's ms per decode step over the bare backbone's, per (profile, sampling,
  concurrency), only where both engines ran under the same profile (the same engine settings);
- backbone bound: the audio seconds per second the bare backbone's greedy step at concurrency c
  would give if every step made one frame for each of c streams (c x frame seconds / step time);
  no talker stream can go faster with the same engine settings.
"""

from __future__ import annotations


def step_ratios(records: list[dict]) -> list[dict]:
    bare = {r["profile"]: {(lvl["sampling"], lvl["concurrency"]): lvl["ms_per_step"] for lvl in r["engine"]}
            for r in records if r["kind"] == "bare"}
    ratios = []
    for record in records:
        if record["kind"] != "talker":
            continue
        for lvl in record["engine"]:
            bare_ms = bare.get(record["profile"], {}).get((lvl["sampling"], lvl["concurrency"]))
            if bare_ms:
                ratios.append({"profile": record["profile"], "runner": record["runner"], "sampling": lvl["sampling"],
                               "concurrency": lvl["concurrency"], "talker_ms_per_step": lvl["ms_per_step"],
                               "bare_ms_per_step": bare_ms, "ratio": lvl["ms_per_step"] / bare_ms})
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
        lines += ["", f"{'profile':22} {'runner':6} {'c':>3} {'TTFA ms':>8} {'rows ms':>8} {'window ms':>9} {'RTF':>6} {'audio s/s':>9} {'bound':>7}"]
        for r in talkers:
            bound = bound_for(results, r["profile"], r["runner"])
            for lvl in r["e2e"]:
                c = lvl["concurrency"]
                b = f"{bound[c]:7.1f}" if c in bound else f"{'-':>7}"
                lines.append(f"{r['profile']:22} {r['runner']:6} {c:>3} {lvl['ttfa_ms_median']:>8.0f} "
                             f"{lvl['first_rows_ms_median']:>8.0f} {lvl['window_ms_median']:>9.0f} "
                             f"{lvl['rtf_median']:>6.3f} {lvl['audio_s_per_s']:>9.1f} {b}")
    if results["ratios"]:
        lines += ["", f"{'profile':22} {'runner':6} {'sampling':8} {'c':>3} {'talker ms':>9} {'bare ms':>8} {'ratio':>6}"]
        for x in results["ratios"]:
            lines.append(f"{x['profile']:22} {x['runner']:6} {x['sampling']:8} {x['concurrency']:>3} "
                         f"{x['talker_ms_per_step']:>9.2f} {x['bare_ms_per_step']:>8.2f} {x['ratio']:>6.2f}")
    lines.append("")
    for r in results["phases"]:
        lines.append(f"{r['name']:28} {r['status']:8} " + (r["message"] or f"boot {r.get('boot_s', 0):.0f} s, "
                                                                 f"phase {r.get('wall_s', 0):.0f} s"))
    return "\n".join(lines)
