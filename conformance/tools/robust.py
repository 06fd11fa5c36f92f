"""The CPU suite under CPU configurations meant to show that its pinned figures do not depend on the CPU.

    python -m conformance.tools.robust [--config NAME]... [--load-seconds S] [-- pytest args...]
    tox -e robust [-- --config NAME] [-- -- pytest args...]

Each configuration is a whole `pytest -m "not gpu"` run (with the pytest args appended) in a
subprocess of its own environment:
- `baseline-isa-1-thread`: torch, MKL and oneDNN held to their pre-AVX kernels
  (ATEN_CPU_CAPABILITY=default, MKL_ENABLE_INSTRUCTIONS=SSE4_2, ONEDNN_MAX_CPU_ISA=SSE41) and one
  thread (OMP_NUM_THREADS, MKL_NUM_THREADS and HIGGS_TORCH_THREADS, the threads of the tests'
  decodes: higgs_dummy/codec_instances.py).
Each configuration compiles into caches of its own (`COMPILE_CACHES`), never reusing what torch
inductor and vLLM compiled under other ISA settings.
- `baseline-isa-2-threads-busy`: the same ISA limits with two threads, and both cores kept busy by
  two busy-loop processes, each under `timeout --load-seconds` (so it stops by itself) and ended
  when the run ends.
Before each run a probe prints what torch sees (its CPU capability, its threads); a configuration
whose limits did not take effect fails without running. vLLM's CPU engines choose their own
threads (VLLM_CPU_OMP_THREADS_BIND); the thread settings reach the rest.

Prints per configuration the passed, failed, errors, skipped and xfailed counts (from pytest's
JUnit XML) with the seconds and PASS or FAIL, then the totals; exits 1 when a configuration fails
(pytest's exit status not 0, or the probe), 2 on usage errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from conformance.environment import CPU_WORKERS

ROOT = Path(__file__).resolve().parents[2]
SELECTION = ["-m", "not gpu", *CPU_WORKERS]
ISA_LIMITS = {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"}
EXPECTED_CAPABILITY = "DEFAULT"  # torch.backends.cpu.get_cpu_capability() under ATEN_CPU_CAPABILITY=default
OUTCOMES = ("passed", "failed", "errors", "skipped", "xfailed")
BUSY_LOOP = "while True: pass"
# Compile caches of the configurations' own: torch inductor keys its cache without the ATen CPU
# capability, so a kernel compiled for AVX-512 was reused under ATEN_CPU_CAPABILITY=default and its C++
# failed to build there ("'at::vec' has not been declared"), killing every compiled CPU engine.
COMPILE_CACHES = ROOT / ".tox" / "robust-compile-caches"
# On a CPU with AMX, vLLM packs bfloat16 weights for its AMX kernel by the CPU's flags
# (torch.cpu._is_amx_tile_supported), while torch's brgemm, held to SSE4.1 by ONEDNN_MAX_CPU_ISA,
# refuses it ("BFloat16 Brgemm VNNI format is only supported ... when `amx` is supported"): every
# bfloat16 CPU engine dies at its first step, a mix no real CPU has. The suite's own engines run
# float32; the benchmark smoke (the profiles' bfloat16, and no pinned figure) is left out there, saying so.
BF16_ENGINE_CHECKS = ("tests/test_benchmark_smoke.py",)
AMX_LEFT_OUT = ("left out: bfloat16 engines under ONEDNN_MAX_CPU_ISA=SSE41 on a CPU with AMX (vLLM picks its "
                "AMX kernel, oneDNN refuses it): " + ", ".join(BF16_ENGINE_CHECKS))


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    threads: int
    busy_processes: int  # busy-loop processes beside the run

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` with this configuration's ISA limits and threads."""
        threads, caches = str(self.threads), COMPILE_CACHES / self.name
        return {**base, **ISA_LIMITS, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                "HIGGS_TORCH_THREADS": threads, "TORCHINDUCTOR_CACHE_DIR": str(caches / "inductor"),
                "VLLM_CACHE_ROOT": str(caches / "vllm")}

    def describe(self) -> str:
        limits = " ".join(f"{k}={v}" for k, v in ISA_LIMITS.items())
        return f"{limits}, {self.threads} thread(s), {self.busy_processes} busy-loop process(es)"


CONFIGS = {c.name: c for c in (Config("baseline-isa-1-thread", threads=1, busy_processes=0),
                               Config("baseline-isa-2-threads-busy", threads=2, busy_processes=2))}


class BusyLoad:
    """`count` busy-loop processes, each in a session of its own under `timeout seconds` (it stops
    by itself), ended (its whole process group) when the `with` block ends."""

    def __init__(self, count: int, seconds: int):
        self.count, self.seconds = count, seconds
        self.processes: list[subprocess.Popen] = []
        self.started = 0.0

    def __enter__(self) -> BusyLoad:
        self.started = time.monotonic()
        for _ in range(self.count):
            self.processes.append(subprocess.Popen(
                ["timeout", "--kill-after=5", str(self.seconds), sys.executable, "-c", BUSY_LOOP],
                start_new_session=True, stdin=subprocess.DEVNULL))
        return self

    def expired(self) -> bool:
        """Whether the load stopped by itself (its time ran out) while the block still ran."""
        return any(p.poll() is not None for p in self.processes)

    def __exit__(self, *exc) -> None:
        for p in self.processes:
            for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                if p.poll() is not None:
                    break
                try:
                    os.killpg(p.pid, sig)  # the group: `timeout` and its busy loop
                except ProcessLookupError:
                    break
                try:
                    p.wait(wait)
                except subprocess.TimeoutExpired:
                    continue


def junit_counts(path: Path) -> Counter:
    """Outcome counts of a pytest JUnit XML file (`OUTCOMES`)."""
    counts: Counter = Counter({k: 0 for k in OUTCOMES})
    for case in ET.parse(path).getroot().iter("testcase"):
        tags = {child.tag: child for child in case}
        if "error" in tags:
            counts["errors"] += 1
        elif "failure" in tags:
            counts["failed"] += 1
        elif "skipped" in tags:
            counts["xfailed" if tags["skipped"].get("type") == "pytest.xfail" else "skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def probe(env: Mapping[str, str]) -> tuple[str, int, bool]:
    """(torch's CPU capability, its threads, whether the CPU has AMX tiles) in a fresh interpreter with `env`."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability(), "
                          "torch.get_num_threads(), torch.cpu._is_amx_tile_supported())"],
                         env=dict(env), capture_output=True, text=True, check=True)
    capability, threads, amx = out.stdout.split()[-3:]
    return capability, int(threads), amx == "True"


@dataclasses.dataclass
class Result:
    name: str
    code: int
    counts: Counter
    seconds: float
    problem: str = ""  # why the configuration failed besides pytest's exit status
    left_out: str = ""  # checks not run in this configuration, and why

    @property
    def ok(self) -> bool:
        return self.code == 0 and not self.problem

    def line(self) -> str:
        counts = ", ".join(f"{k} {self.counts[k]}" for k in OUTCOMES)
        verdict = "PASS" if self.ok else f"FAIL (pytest exit {self.code}{'; ' + self.problem if self.problem else ''})"
        return f"[{self.name}] {counts} in {self.seconds:.0f} s: {verdict}" + (f"; {self.left_out}" if self.left_out else "")


def run_config(config: Config, pytest_args: list[str], load_seconds: int) -> Result:
    env = config.env(os.environ)
    print(f"\nrobust: [{config.name}] {config.describe()}", flush=True)
    capability, threads, amx = probe(env)
    print(f"robust: [{config.name}] torch sees CPU capability {capability}, {threads} thread(s)"
          + (", AMX tiles" if amx else ""), flush=True)
    if (capability, threads) != (EXPECTED_CAPABILITY, config.threads):
        return Result(config.name, 0, Counter(), 0.0, f"the limits did not take effect: torch sees {capability} with "
                      f"{threads} thread(s), expected {EXPECTED_CAPABILITY} with {config.threads}")
    left_out = AMX_LEFT_OUT if amx else ""
    if left_out:
        print(f"robust: [{config.name}] {left_out}", flush=True)
        pytest_args = [*(f"--deselect={path}" for path in BF16_ENGINE_CHECKS), *pytest_args]
    with tempfile.TemporaryDirectory(prefix="robust-") as tmp:
        xml = Path(tmp) / "junit.xml"
        # xunit1: the JUnit flavour that keeps record_property (the figures) without a warning per figure.
        cmd = [sys.executable, "-m", "pytest", *SELECTION, "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
               f"--junitxml={xml}", *pytest_args]
        start = time.monotonic()
        with BusyLoad(config.busy_processes, load_seconds) as load:
            code = subprocess.run(cmd, cwd=ROOT, env=env).returncode
            expired = load.expired()
        seconds = time.monotonic() - start
        wrote = xml.exists()
        counts = junit_counts(xml) if wrote else Counter()
    problem = ""
    if expired:
        problem = f"the busy load stopped after {load_seconds} s, before the run ended: raise --load-seconds"
    elif not wrote:
        problem = "pytest wrote no JUnit XML"
    return Result(config.name, code, counts, seconds, problem, left_out)


def summary(results: list[Result]) -> list[str]:
    total: Counter = Counter()
    for r in results:
        total.update(r.counts)
    passed = sum(r.ok for r in results)
    return (["\n== robust: the CPU suite per CPU configuration =="] + [r.line() for r in results]
            + [f"total: {', '.join(f'{k} {total[k]}' for k in OUTCOMES)}; "
               f"{passed} of {len(results)} configurations passed"])


def parse(argv: list[str]) -> argparse.Namespace:
    extra: list[str] = []
    if "--" in argv:
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    p = argparse.ArgumentParser(prog="python -m conformance.tools.robust", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", action="append", choices=sorted(CONFIGS), help="run only this configuration (repeatable)")
    p.add_argument("--load-seconds", type=int, default=5400,
                   help="how long each busy-loop process may live at most (default 5400)")
    args = p.parse_args(argv)
    if args.load_seconds < 1:
        p.error(f"--load-seconds must be 1 or more, got {args.load_seconds}")
    args.pytest_args = extra
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    results = [run_config(CONFIGS[name], args.pytest_args, args.load_seconds) for name in (args.config or CONFIGS)]
    print("\n".join(summary(results)))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
