"""Two implementations side by side: each of our deploy profiles against its upstream counterpart,
through HTTP, on one machine, the same checkpoint, text and load (benchmarks/served.py per side).

    python -m benchmarks.race --out-dir DIR --size 4b --concurrency 1 16 64 --rows 257 \\
        --pair default "vllm-omni serve {checkpoint} --omni --trust-remote-code --port {port} \\
                        --deploy-config DEPLOY/higgs_multimodal_qwen3.yaml" \\
        --pair high_throughput_v2 "vllm-omni serve ... DEPLOY/higgs_multimodal_qwen3_high_throughput.yaml"

For each pair: our server with the profile (DIR/PROFILE-ours/) and the pair's command
(DIR/PROFILE-upstream/), one after the other, each started, measured and stopped by served.py.
Both get `--rows` rows of 40 ms per request, each in its own field: ours `max_tokens`, vllm-omni's
`max_new_tokens` (its OpenAICreateSpeechRequest; `--upstream-rows-field`). A side whose
served.json already says "ok" is not run again, so the same command, repeated, finishes a race
that a time limit cut. `--compare PROFILE OURS UPSTREAM` compares two finished served.py folders
(of earlier sittings) instead of running anything. Writes DIR/race.json and DIR/race.md: per pair
and level, TTFA p50/p99, RTF p50 and audio s/s of each side, and ours over upstream's (TTFA and RTF:
below 1 is ours faster; audio s/s: above 1 is ours more); DIR/race.png: TTFA and audio s/s against
streams, ours solid and upstream dashed, a colour per pair.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks import served

FIGURES = (("ttfa_ms", "p50", "TTFA p50 ms"), ("ttfa_ms", "p99", "TTFA p99 ms"), ("rtf_p50", None, "RTF p50"),
           ("audio_s_per_s", None, "audio s/s"))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.race", description=__doc__.splitlines()[0])
    p.add_argument("--pair", nargs=2, action="append", default=[], metavar=("PROFILE", "COMMAND"),
                   help="our deploy profile and the command that starts its upstream counterpart")
    p.add_argument("--compare", nargs=3, action="append", default=[], type=Path, metavar=("PROFILE", "OURS", "UPSTREAM"),
                   help="served.py folders of both sides, finished earlier: compared, nothing run")
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument("--size", default="4b", choices=["tiny", "4b"])
    p.add_argument("--platform", help="default: cuda when torch sees a GPU, else cpu")
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 16, 64])
    p.add_argument("--rows", type=int, default=served.DEFAULT_MAX_TOKENS, help="rows of 40 ms per request")
    p.add_argument("--upstream-rows-field", default="max_new_tokens")
    p.add_argument("--requests", type=int, help="per level (served.py's default: 3c, at least 4)")
    p.add_argument("--boot-timeout", type=float, default=600.0)
    p.add_argument("--level-timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    if not args.pair and not args.compare:
        p.error("name at least one --pair or --compare")
    return args


def side_argv(args, profile: str, command: str | None) -> list[str]:
    """served.py's arguments for one side: ours with `profile`, or the upstream `command`."""
    argv = ["--size", args.size, "--concurrency", *map(str, args.concurrency),
            "--boot-timeout", str(args.boot_timeout), "--level-timeout", str(args.level_timeout)]
    argv += ["--platform", args.platform] if args.platform else []
    argv += ["--requests", str(args.requests)] if args.requests else []
    if command is None:
        return argv + ["--profile", profile, "--max-tokens", str(args.rows)]
    return argv + ["--serve-command", command, "--max-tokens", "0",
                   "--extra-body", json.dumps({args.upstream_rows_field: args.rows})]


def _figure(level: dict, key: str, point: str | None):
    value = level.get(key)
    return value.get(point) if point else value


def compare(ours: dict, upstream: dict) -> list[dict]:
    """Per closed-loop level both sides ran: each figure of each side and ours over upstream's."""
    theirs = {lvl["load"]: lvl for lvl in upstream["levels"] if lvl["kind"] == "closed"}
    rows = []
    for level in (lvl for lvl in ours["levels"] if lvl["kind"] == "closed" and lvl["load"] in theirs):
        other = theirs[level["load"]]
        row = {"concurrency": level["load"], "ok": [level["ok"], other["ok"]], "failed": [level["failed"], other["failed"]]}
        for key, point, name in FIGURES:
            a, b = _figure(level, key, point), _figure(other, key, point)
            row[name] = {"ours": a, "upstream": b, "ratio": a / b if a is not None and b else None}
        rows.append(row)
    return rows


def markdown(race: dict) -> str:
    head = "| our profile | streams | " + " | ".join(f"{name} ours / upstream (ratio)" for *_, name in FIGURES)
    lines = [head + " | failed ours / upstream |", "|---|---|" + "---|" * (len(FIGURES) + 1)]
    for pair in race["pairs"]:
        if pair["status"] != "ok":
            lines.append(f"| {pair['profile']} | - | {pair['status']} |" + " |" * len(FIGURES))
            continue
        for row in pair["levels"]:
            cells = []
            for *_, name in FIGURES:
                f = row[name]
                cells.append("-" if f["ratio"] is None else f"{f['ours']:.3g} / {f['upstream']:.3g} ({f['ratio']:.2f})")
            lines.append(f"| {pair['profile']} | {row['concurrency']:g} | " + " | ".join(cells)
                         + f" | {row['failed'][0]} / {row['failed'][1]} |")
    return "\n".join(lines) + "\n"


def _finished(folder: Path) -> dict | None:
    path = folder / "served.json"
    if path.exists() and (result := json.loads(path.read_text()))["status"] == "ok":
        return result
    return None


def raced(args, profile: str, command: str) -> dict:
    """Both sides of a --pair, each run unless its folder holds a finished served.json."""
    sides = {}
    for side, cmd in (("ours", None), ("upstream", command)):
        folder = args.out_dir / f"{profile}-{side}"
        if _finished(folder) is None:
            print(f"== {profile}: {side}", flush=True)
            served.main(side_argv(args, profile, cmd) + ["--out-dir", str(folder)])
        sides[side] = _finished(folder)
    return _pair(profile, sides, upstream_command=command)


def _pair(profile: str, sides: dict, **source) -> dict:
    missing = [side for side, result in sides.items() if result is None]
    pair = {"profile": profile, **source,
            "status": "ok" if not missing else f"not finished: {', '.join(missing)} (see its served.json)"}
    if not missing:
        pair["levels"] = compare(sides["ours"], sides["upstream"])
    return pair


def plot(race: dict, path: Path) -> bool:
    """TTFA p50 and p99, and audio s/s, against streams: ours solid, upstream dashed; False: nothing to draw."""
    pairs = [pair for pair in race["pairs"] if pair["status"] == "ok"]
    if not pairs:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    panels = (("TTFA p50 ms", "ms"), ("TTFA p99 ms", "ms"), ("audio s/s", "audio seconds per second"))
    for pair, colour in zip(pairs, plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        xs = [row["concurrency"] for row in pair["levels"]]
        for ax, (name, _) in zip(axes, panels):
            for side, style in (("ours", "-"), ("upstream", "--")):
                ax.plot(xs, [served._nan(row[name][side]) for row in pair["levels"]], style, marker="o", color=colour,
                        label=f"{pair['profile']}: {side}")
    streams = sorted({row["concurrency"] for pair in pairs for row in pair["levels"]})
    for ax, (name, unit) in zip(axes, panels):
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("concurrent streams (closed loop)")
        ax.set_ylabel(unit)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(streams, [f"{x:g}" for x in streams])
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle("ours over HTTP against upstream's counterpart, each deploy profile", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    race = {"command": "python -m benchmarks.race " + " ".join(sys.argv[1:] if argv is None else argv), "pairs": []}
    race["pairs"] += [raced(args, profile, command) for profile, command in args.pair]
    race["pairs"] += [_pair(str(profile), {"ours": _finished(ours), "upstream": _finished(upstream)},
                            ours=str(ours), upstream=str(upstream)) for profile, ours, upstream in args.compare]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "race.json").write_text(json.dumps(race, indent=1) + "\n")
    (args.out_dir / "race.md").write_text(markdown(race))
    plot(race, args.out_dir / "race.png")
    print(markdown(race))
    return 0 if all(pair["status"] == "ok" for pair in race["pairs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
