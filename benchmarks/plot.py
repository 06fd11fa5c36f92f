"""The PNG of a run: TTFA, RTF and audio s/s per concurrency for every end-to-end profile, with the
backbone bound as dashed lines, and the engine-only talker/bare step ratios as bars.

    python -m benchmarks.plot RESULTS.json [OUT.png]     (again from a run's JSON)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def plot(results: dict, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display on the machines this runs on
    import matplotlib.pyplot as plt

    modes = results["settings"]["modes"]
    panels = (["ttfa", "rtf", "throughput"] if "e2e" in modes else []) + (["ratio"] if "engine" in modes else [])
    rows = 2 if len(panels) == 4 else 1
    cols = len(panels) // rows
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.4 * rows), squeeze=False)
    ax = dict(zip(panels, axes.flat))
    talkers = [r for r in results["phases"] if r["kind"] == "talker" and r["e2e"]]
    levels_run = sorted({lvl["concurrency"] for r in talkers for lvl in r["e2e"]})
    for r in talkers:
        levels = r["e2e"]
        cs = [lvl["concurrency"] for lvl in levels]
        label = f"{r['profile']} ({r['runner'].upper()})"
        line, = ax["ttfa"].plot(cs, [lvl["ttfa_ms_median"] for lvl in levels], marker="o", label=label)
        ax["rtf"].plot(cs, [lvl["rtf_median"] for lvl in levels], marker="o", color=line.get_color(), label=label)
        ax["throughput"].plot(cs, [lvl["audio_s_per_s"] for lvl in levels], marker="o", color=line.get_color(), label=label)
    if "throughput" in ax:
        for style, profile in zip(("--", ":", "-."), dict.fromkeys(b["profile"] for b in results["backbone_bound"])):
            bound = [b for b in results["backbone_bound"] if b["profile"] == profile]
            ax["throughput"].plot([b["concurrency"] for b in bound], [b["audio_s_per_s"] for b in bound],
                                  linestyle=style, color="gray",
                                  label=f"backbone bound: bare Qwen3, {profile} ({bound[0]['runner'].upper()})")
    for name, title, unit in (("ttfa", "time to first audio", "ms (median)"), ("rtf", "real-time factor", "median"),
                              ("throughput", "audio seconds per second", "all streams")):
        if name in ax:
            _concurrency_axis(ax[name], title, unit, levels_run)
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
        ax.text(0.5, 0.5, "no ratio: a talker or bare phase did not finish", ha="center", transform=ax.transAxes)


if __name__ == "__main__":
    source = Path(sys.argv[1])
    plot(json.loads(source.read_text()), sys.argv[2] if len(sys.argv) > 2 else source.with_suffix(".png"))
