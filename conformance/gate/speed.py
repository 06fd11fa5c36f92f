"""The upgrade gate's speed area on a GPU: a short benchmark (python -m benchmarks) whose ratios
become verdict figures, each with a tolerance measured in the same run.

    python -m conformance.gate.speed VERDICT --run [--budget S] [--out-dir DIR]   # the GPU machine
    python -m conformance.gate.speed VERDICT --speed DIR/speed.json               # an earlier benchmark

The benchmark (BENCHMARK_ARGS, about 440 s on one H100 with vLLM 0.26.0, 480 s with 0.33.0, three engine boots):
talker and bare Qwen3 of its shape under the `default` profile (Model Runner V2, CUDA graphs),
engine only, default sampling, at 1, 16 and 64 requests, each step time the median of REPEATS
timed pairs; and 16 streams end to end under `default` (V2) and `high_throughput` (V1), REPEATS
rounds each. The figures (`speed::...`, unit x):

- talker_over_bare_step[c=N]: talker ms/step / bare ms/step (medians);
- v2_over_v1_ttfa[c=16], v2_over_v1_audio_s_per_s[c=16]: V2 / V1 of the rounds' medians.

A figure's tolerance is what the run itself says about its noise: the ratio's range over every
pairing of the two sides' samples (rounds or timed pairs), half of it, times SPREAD_FACTOR, and at
least FLOOR of the value. A candidate further from the baseline than that is a finding. Each figure
keeps its two sides' medians (`sides`), so the diff says which side moved: a V2/V1 ratio that grows
because V1 slowed down is V1's regression, not V2's gain.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPEATS = 3
SPREAD_FACTOR = 2.0
FLOOR = 0.05
LEVELS = (1, 16, 64)
BENCHMARK_ARGS = ["--size", "4b", "--profiles", "default", "high_throughput", "--engine-profiles", "default",
                  "--modes", "e2e", "engine", "--e2e-concurrency", "16",
                  "--engine-concurrency", *map(str, LEVELS), "--sampling", "default",
                  "--rounds", str(REPEATS), "--engine-repeats", str(REPEATS), "--phase-timeout", "300"]


def ratio_figure(top: list[float], bottom: list[float], sides: tuple[str, str], sides_unit: str, note: str) -> dict:
    """median(top) / median(bottom), its tolerance from the samples' spread (module docstring), and
    both medians under the names in `sides`."""
    value = statistics.median(top) / statistics.median(bottom)
    pairs = [t / b for t, b in itertools.product(top, bottom)]
    spread = (max(pairs) - min(pairs)) / 2
    tolerance = max(SPREAD_FACTOR * spread, FLOOR * value)
    return {"value": round(value, 3), "unit": "x", "tolerance": round(tolerance, 3), "class": "measured",
            "samples": [len(top), len(bottom)], "note": note,
            "sides": {sides[0]: round(statistics.median(top), 3), sides[1]: round(statistics.median(bottom), 3)},
            "sides_unit": sides_unit}


def _phase(speed: dict, name: str) -> dict:
    for phase in speed["phases"]:
        if phase["name"] == name:
            if phase.get("status") != "ok":
                raise ValueError(f"benchmark phase {name} did not finish: {phase.get('message')}")
            return phase
    raise ValueError(f"benchmark phase {name} missing (did the benchmark run with conformance.gate.speed's arguments?)")


def figures(speed: dict) -> dict[str, dict]:
    """The speed figures of a benchmark run with BENCHMARK_ARGS (speed.json)."""
    talker, bare, v1 = (_phase(speed, n) for n in ("talker/default", "bare/default", "talker/high_throughput"))

    def steps(phase: dict, c: int) -> list[float]:
        for e in phase["engine"]:
            if e["sampling"] == "default" and e["concurrency"] == c:
                return e.get("ms_per_step_samples") or [e["ms_per_step"]]
        raise ValueError(f"{phase['name']}: no engine level default c={c}")

    def rounds(phase: dict, key: str) -> list[float]:
        level = next(e for e in phase["e2e"] if e["concurrency"] == 16)
        return [r[key] for r in level.get("rounds") or [{key: level[key]}]]

    out = {}
    for c in LEVELS:
        out[f"speed::talker_over_bare_step[c={c}]"] = ratio_figure(
            steps(talker, c), steps(bare, c), ("talker", "bare"), "ms/step",
            f"ms/step, V2 default profile, default sampling, {c} requests")
    runners = ("V2 default", "V1 high_throughput")
    out["speed::v2_over_v1_ttfa[c=16]"] = ratio_figure(
        rounds(talker, "ttfa_ms_median"), rounds(v1, "ttfa_ms_median"), runners, "ms TTFA",
        "TTFA median, 16 streams, default / high_throughput")
    out["speed::v2_over_v1_audio_s_per_s[c=16]"] = ratio_figure(
        rounds(talker, "audio_s_per_s"), rounds(v1, "audio_s_per_s"), runners, "audio s/s",
        "audio s/s, 16 streams, default / high_throughput")
    return out


def add_to_verdict(verdict_path: Path, speed: dict, source: str) -> dict:
    verdict = json.loads(verdict_path.read_text())
    if speed.get("vllm_version") != verdict["vllm"]:
        raise ValueError(f"the benchmark ran vLLM {speed.get('vllm_version')}, the verdict {verdict['vllm']}")
    verdict["figures"] = dict(sorted({**verdict.get("figures", {}), **figures(speed)}.items()))
    verdict["speed"] = {"source": source, "device": speed.get("device"), "wall_s": speed.get("wall_s"),
                        "benchmark_args": BENCHMARK_ARGS}
    verdict_path.write_text(json.dumps(verdict, indent=1) + "\n")
    return verdict


def run_benchmark(out_dir: Path, budget: float) -> Path:
    command = [sys.executable, "-m", "benchmarks", *BENCHMARK_ARGS, "--budget", str(budget), "--out-dir", str(out_dir)]
    print("gate: " + " ".join(command), flush=True)
    subprocess.run(command, cwd=ROOT, check=False)
    return out_dir / "speed.json"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.gate.speed", description=__doc__.split("\n\n")[0])
    p.add_argument("verdict", type=Path, help="the verdict the speed figures are added to")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", action="store_true", help="run the benchmark now (a CUDA machine)")
    source.add_argument("--speed", type=Path, help="speed.json of an earlier benchmark run with these arguments")
    p.add_argument("--budget", type=float, default=570.0, help="seconds for the benchmark (default 570: one device command)")
    p.add_argument("--out-dir", type=Path, help="where the benchmark writes (default .tox/gate-speed-<time>)")
    args = p.parse_args(argv)
    path = args.speed or run_benchmark(args.out_dir or ROOT / ".tox" / f"gate-speed-{time.strftime('%Y%m%dT%H%M%S')}",
                                       args.budget)
    try:
        verdict = add_to_verdict(args.verdict, json.loads(path.read_text()), str(path))
    except (OSError, ValueError) as error:
        print(f"gate speed: {error}", file=sys.stderr)
        return 1
    for name, figure in verdict["figures"].items():
        if name.startswith("speed::"):
            print(f"  {name} = {figure['value']} +- {figure['tolerance']} {figure['unit']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
