"""The gate's step figures (conformance.gate.speed.ratio_figure) from this sitting's two benchmark runs, judged as
the gate's diff judges them (beyond when further from the baseline's value than the baseline's tolerance) against
golden/gate/cuda-0.26.0.json, beside the committed 0.33.0 verdict's figures.

    PYTHONPATH=. python3 benchmarks/results/2026-12-06-gpu-033-step/scripts/step_ratios.py > benchmarks/results/2026-12-06-gpu-033-step/step_ratios.txt
"""
import json
from pathlib import Path

from conformance.gate.speed import LEVELS, ratio_figure

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parents[2]


def steps(speed: dict, name: str, c: int) -> list[float]:
    phase = next(p for p in speed["phases"] if p["name"] == name)
    return next(e for e in phase["engine"] if e["sampling"] == "default" and e["concurrency"] == c)["ms_per_step_samples"]


graphs, eager = (json.loads((HERE / "res" / d / "speed.json").read_text()) for d in ("engine-033", "eager-033"))
base, old = (json.loads((ROOT / f"golden/gate/cuda-{v}.json").read_text())["figures"] for v in ("0.26.0", "0.33.0"))
print(f"{graphs['device']}, vLLM {graphs['vllm_version']}; ms per step, 3 timed pairs each; the bare steps of the first run")
for c in LEVELS:
    key = f"speed::talker_over_bare_step[c={c}]"
    b = base[key]
    bare = steps(graphs, "bare/default", c)
    for label, run in (("sampling step in graphs", graphs), ("sampling step eager", eager)):
        talker = steps(run, "talker/default", c)
        f = ratio_figure(talker, bare, "")
        verdict = "beyond" if abs(f["value"] - b["value"]) > b["tolerance"] else "within"
        print(f"c={c:2d} {label:23s} talker {min(talker):.2f}-{max(talker):.2f} bare {min(bare):.2f}-{max(bare):.2f} ms:"
              f" {f['value']} +- {f['tolerance']}; baseline {b['value']} +- {b['tolerance']}: {verdict}"
              f" (the 0.33.0 verdict: {old[key]['value']})")
