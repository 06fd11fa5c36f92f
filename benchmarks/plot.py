"""The PNG of a run: TTFA, RTF and audio s/s per concurrency for every end-to-end profile (medians
over the rounds, their min-max shaded), with the backbone bound as dashed lines; TTFA's split in
five as stacked bars per profile and concurrency (spread.py: the parts of the median TTFA, its
min-max as the error bar); and the engine-only talker/bare step ratios as bars.

    python -m benchmarks.plot RESULTS.json [OUT.png]     (again from a run's JSON)
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from benchmarks.spread import SPLIT


def plot(results: dict, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display on the machines this runs on
    import matplotlib.pyplot as plt

    modes = results["settings"]["modes"]
    panels = ((["ttfa", "rtf", "throughput", "split"] if "e2e" in modes else [])
              + (["ratio"] if "engine" in modes else []))
    rows = 1 if len(panels) <= 3 else 2
    cols = math.ceil(len(panels) / rows)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.4 * rows), squeeze=False)
    ax = dict(zip(panels, axes.flat))
    for unused in axes.flat[len(panels):]:
        unused.axis("off")
    talkers = [r for r in results["phases"] if r["kind"] == "talker" and r["e2e"]]
    levels_run = sorted({lvl["concurrency"] for r in talkers for lvl in r["e2e"]})
    for r in talkers:
        levels = r["e2e"]
        cs = [lvl["concurrency"] for lvl in levels]
        label = f"{r['profile']} ({r['runner'].upper()})"
        color = None
        for name, median, spread in (("ttfa", "ttfa_ms_median", "ttfa_ms"), ("rtf", "rtf_median", "rtf"),
                                     ("throughput", "audio_s_per_s", "audio_s_per_s")):
            line, = ax[name].plot(cs, [lvl[median] for lvl in levels], marker="o", color=color, label=label)
            color = line.get_color()
            if all("spread" in lvl for lvl in levels):  # runs before the spread was recorded have none
                ranges = [lvl["spread"][spread] for lvl in levels]
                ax[name].fill_between(cs, [lo for lo, _ in ranges], [hi for _, hi in ranges], color=color, alpha=0.15)
    if "throughput" in ax:
        for style, profile in zip(("--", ":", "-."), dict.fromkeys(b["profile"] for b in results["backbone_bound"])):
            bound = [b for b in results["backbone_bound"] if b["profile"] == profile]
            ax["throughput"].plot([b["concurrency"] for b in bound], [b["audio_s_per_s"] for b in bound],
                                  linestyle=style, color="gray",
                                  label=f"backbone bound: bare Qwen3, {profile} ({bound[0]['runner'].upper()})")
    for name, title, unit in (("ttfa", "time to first audio", "ms (median, shaded: min-max)"),
                              ("rtf", "real-time factor", "median (shaded: min-max)"),
                              ("throughput", "audio seconds per second", "all streams (median, shaded: min-max)")):
        if name in ax:
            _concurrency_axis(ax[name], title, unit, levels_run)
    if "split" in ax:
        _split_bars(ax["split"], talkers)
    if "ratio" in ax:
        _ratio_bars(ax["ratio"], results["ratios"])
    fig.suptitle(f"Higgs Audio v3 talker: {results['device']}, vLLM {results['vllm_version']}, "
                 f"{results['settings']['size']} dummy checkpoint", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _concurrency_axis(ax, title: str, unit: str, levels: list[int]) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel(unit)
    ax.set_xscale("log", base=2)
    if levels:
        ax.set_xticks(levels, [str(c) for c in levels])
        ax.minorticks_off()
    ax.grid(alpha=0.3)
    if ax.has_data():
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no data: see the phases' status", ha="center", transform=ax.transAxes)


def _split_bars(ax, talkers: list[dict]) -> None:
    """One stacked bar per (profile, concurrency): the parts of its median TTFA (spread.SPLIT)."""
    ax.set_title("TTFA split: the median's parts", fontsize=10)
    bars = [(r, lvl) for r in talkers for lvl in r["e2e"] if "split_ms" in lvl]
    xs = range(len(bars))
    bottom = [0.0] * len(bars)
    for part in SPLIT:
        heights = [lvl["split_ms"][part] for _, lvl in bars]
        ax.bar(xs, heights, 0.7, bottom=bottom, label=part.replace("_", " "))
        bottom = [b + h for b, h in zip(bottom, heights)]
    if bars:
        ttfa = [lvl["ttfa_ms_median"] for _, lvl in bars]
        ranges = [lvl["spread"]["ttfa_ms"] for _, lvl in bars]
        below_above = [[t - lo for t, (lo, _) in zip(ttfa, ranges)], [hi - t for t, (_, hi) in zip(ttfa, ranges)]]
        ax.errorbar(xs, ttfa, yerr=below_above,
                    fmt="none", ecolor="black", capsize=3, linewidth=0.8, label="TTFA min-max")
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles[::-1], labels[::-1], fontsize=7)  # top to bottom, as the parts stack
    else:
        ax.text(0.5, 0.5, "no split: no end-to-end level finished, or a run from before the split",
                ha="center", transform=ax.transAxes)
    ax.set_xticks(list(xs), [f"{r['profile']} ({r['runner'].upper()}) c={lvl['concurrency']}" for r, lvl in bars],
                  fontsize=6, rotation=30, ha="right")
    ax.set_ylabel("ms")
    ax.grid(alpha=0.3, axis="y")


def _ratio_bars(ax, ratios: list[dict]) -> None:
    ax.set_title("engine only: talker / bare Qwen3 ms per step", fontsize=10)
    ax.axhline(1.0, color="gray", linewidth=0.8)
    groups = sorted({x["concurrency"] for x in ratios})
    series = list(dict.fromkeys(f"{x['profile']} ({x['runner'].upper()}), {x['sampling']}" for x in ratios))
    width = 0.8 / max(len(series), 1)
    for i, name in enumerate(series):
        values = {x["concurrency"]: x["ratio"] for x in ratios
                  if f"{x['profile']} ({x['runner'].upper()}), {x['sampling']}" == name}
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [values.get(c, 0.0) for c in groups], width, label=name)
    ax.set_xticks(range(len(groups)), [str(c) for c in groups])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("ratio")
    ax.grid(alpha=0.3, axis="y")
    if ratios:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no ratio: no bare phase ran (--no-bare), or one did not finish", ha="center", transform=ax.transAxes)


if __name__ == "__main__":
    source = Path(sys.argv[1])
    plot(json.loads(source.read_text()), sys.argv[2] if len(sys.argv) > 2 else source.with_suffix(".png"))
