"""A plan's bundles: wheels checked against SHA256SUMS, then installed with `pip install --no-index --no-deps
--target TARGET` (and Debian packages unpacked into TARGET/debroot, as conformance/tools/bundle.py does).

What SHA256SUMS lists says how `from` is laid out:
- wheels: *.whl files in `from`; each is checked, and a wheel there that SHA256SUMS does not list is refused;
- parts: the parts of one tar (part-aa, part-ab, ...: ../shared/device/make-bundle.sh and
  conformance/tools/bundle.py write them; w/*.whl and deb/*.deb inside), all in `from`; a part there that
  SHA256SUMS does not list is refused;
- chunks: the same parts joined and re-split into chunk-* files (one carried per staging call): their joined
  bytes are cut every `part_mib` MiB and each cut checked against the part it stands for.
MANIFEST.json (bundle.py's), beside SHA256SUMS or in `from`, must name the same parts, and once unpacked the
same wheels and Debian packages.

Nothing is installed unless every check passes. The install is built in a folder beside the target and renamed
into place with a marker (.sitting-bundle.json: SHA256SUMS's digest and the selection); a target with the
marker of the same SHA256SUMS and selection counts as installed (a second call on a warm machine), any other
target that holds files is refused."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shutil
import signal
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from conformance.sitting import groups
from conformance.sitting.plan import Bundle
from conformance.tools.bundle import DEBROOT, MANIFEST, extract_deb

MARKER = ".sitting-bundle.json"
DEFAULT_PART_MIB = 60  # make-bundle.sh's `split -b 60m`, bundle.py's PART_MIB
BLOCK = 1 << 20


class BundleError(Exception):
    pass


@dataclass(frozen=True)
class Checked:
    layout: str  # wheels, parts or chunks
    files: tuple[Path, ...]  # the wheels, or the parts or chunks in the order their bytes join


def stage_incoming(bundle: Bundle) -> int:
    """Moves the files carried in `incoming` into `from`; returns how many."""
    if bundle.incoming is None or not bundle.incoming.is_dir():
        return 0
    bundle.source.mkdir(parents=True, exist_ok=True)
    moved = 0
    for file in sorted(p for p in bundle.incoming.iterdir() if p.is_file()):
        shutil.move(str(file), bundle.source / file.name)
        moved += 1
    return moved


def read_sums(path: Path) -> list[tuple[str, str]]:
    """(digest, name) of each line of a SHA256SUMS file (sha256sum's text or binary mode)."""
    if not path.is_file():
        raise BundleError(f"no {path}: copy SHA256SUMS there with the bundle")
    sums = []
    for line in path.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums.append((digest.lower(), name.strip().lstrip("*")))
    if not sums:
        raise BundleError(f"{path} lists nothing")
    return sums


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
    return h.hexdigest()


def _manifest(bundle: Bundle) -> dict | None:
    for folder in (bundle.sums.parent, bundle.source):
        if (folder / MANIFEST).is_file():
            return json.loads((folder / MANIFEST).read_text())
    return None


def _check_listed(bundle: Bundle, sums: list[tuple[str, str]], pattern: str) -> list[Path]:
    listed = {name for _, name in sums}
    stray = sorted(p.name for p in bundle.source.glob(pattern) if p.name not in listed)
    if stray:
        raise BundleError(f"{', '.join(stray)} in {bundle.source} not in {bundle.sums}: stage one bundle per folder")
    for digest, name in sums:
        if _sha256(bundle.source / name) != digest:
            raise BundleError(f"{name} in {bundle.source} does not match {bundle.sums}: copy it again")
    return [bundle.source / name for _, name in sums]


class Joined:
    """The bytes of several files one after the other, read as one stream (tarfile's `r|`)."""

    def __init__(self, files: list[Path]):
        self.files = list(files)
        self.current = None

    def read(self, size: int = -1) -> bytes:
        out = b""
        while size < 0 or len(out) < size:
            if self.current is None:
                if not self.files:
                    break
                self.current = self.files.pop(0).open("rb")
            block = self.current.read(BLOCK if size < 0 else size - len(out))
            if not block:
                self.current.close()
                self.current = None
                continue
            out += block
        return out


def _check_chunks(chunks: list[Path], sums: list[tuple[str, str]], part_bytes: int, sums_path: Path) -> None:
    """The chunks' joined bytes, cut every part_bytes, against the parts' digests in order."""
    stream, index = Joined(chunks), 0
    while data := stream.read(part_bytes):
        if index == len(sums):
            raise BundleError(f"the chunks hold more than the {len(sums)} parts {sums_path} lists: "
                              "a chunk of another bundle?")
        digest, name = sums[index]
        if hashlib.sha256(data).hexdigest() != digest:
            start = index * part_bytes
            raise BundleError(f"bytes {start}-{start + len(data)} of the joined chunks do not "
                              f"match {name} in {sums_path}: a chunk is missing or damaged ({len(chunks)} chunks), or "
                              f"the parts were not {part_bytes >> 20} MiB (part_mib)")
        index += 1
    if index < len(sums):
        raise BundleError(f"the chunks hold {index} of the {len(sums)} parts {sums_path} lists: chunks missing "
                          f"({len(chunks)} staged)")


def check(bundle: Bundle) -> Checked:
    """Every file of the bundle against SHA256SUMS (and MANIFEST.json); raises BundleError naming the first fault."""
    sums = read_sums(bundle.sums)
    manifest = _manifest(bundle)
    if all(name.endswith(".whl") for _, name in sums):
        return Checked("wheels", tuple(_check_listed(bundle, sums, "*.whl")))
    if manifest is not None and manifest.get("parts") not in (None, [name for _, name in sums]):
        raise BundleError(f"{MANIFEST} names the parts {manifest['parts']}, {bundle.sums} "
                          f"{[name for _, name in sums]}: copy both from the one bundle")
    if all((bundle.source / name).is_file() for _, name in sums):
        return Checked("parts", tuple(_check_listed(bundle, sums, "part-*")))
    chunks = sorted(bundle.source.glob("chunk-*"))
    if not chunks:
        missing = next(name for _, name in sums if not (bundle.source / name).is_file())
        raise BundleError(f"{missing} is missing from {bundle.source} (and no chunk-* there): stage every part first")
    part_mib = bundle.part_mib or (manifest or {}).get("part_mib") or DEFAULT_PART_MIB
    _check_chunks(chunks, sums, part_mib << 20, bundle.sums)
    return Checked("chunks", tuple(chunks))


def _unpack(checked: Checked, into: Path, manifest: dict | None) -> tuple[list[Path], list[Path]]:
    """The tar the parts (or chunks) hold, unpacked into `into`: (wheels, Debian packages)."""
    with tarfile.open(fileobj=Joined(list(checked.files)), mode="r|") as tar:
        tar.extractall(into, filter="data")
    wheels, debs = sorted((into / "w").glob("*.whl")), sorted((into / "deb").glob("*.deb"))
    if manifest is not None:
        for key, found in (("wheels", wheels), ("debs", debs)):
            if key in manifest and sorted(manifest[key]) != [p.name for p in found]:
                raise BundleError(f"the parts hold {key} {[p.name for p in found]}, {MANIFEST} lists "
                                  f"{sorted(manifest[key])}: parts and manifest of different bundles")
    return wheels, debs


def select(files: list[Path], only: tuple[str, ...], exclude: tuple[str, ...]) -> list[Path]:
    """The files whose names match a pattern of `only` (all when empty) and none of `exclude`."""
    return [f for f in files if (not only or any(fnmatch.fnmatch(f.name, p) for p in only))
            and not any(fnmatch.fnmatch(f.name, p) for p in exclude)]


def pip_words(target: Path, wheels: list[Path]) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--target",
            str(target), *map(str, wheels)]


def _marker(bundle: Bundle) -> dict:
    return {"sha256sums": _sha256(bundle.sums), "only": list(bundle.only), "exclude": list(bundle.exclude)}


def installed(bundle: Bundle) -> bool:
    """The target holds this bundle already: its marker names the same SHA256SUMS and selection."""
    marker = bundle.target / MARKER
    return marker.is_file() and bundle.sums.is_file() and json.loads(marker.read_text()) == _marker(bundle)


def install(bundle: Bundle, log: Path, env: dict[str, str], limit_s: float) -> str:
    """Checks, then installs `bundle` into its target within limit_s; returns what it did, raises BundleError."""
    started = time.monotonic()
    with log.open("a") as out:
        if moved := stage_incoming(bundle):
            out.write(f"staged {moved} files from {bundle.incoming} into {bundle.source}\n")
    if installed(bundle):
        return f"already installed in {bundle.target} (the same SHA256SUMS and selection)"
    if bundle.target.exists() and any(bundle.target.iterdir()):
        raise BundleError(f"{bundle.target} holds files of another install: remove it, or name a new target")
    checked = check(bundle)
    with log.open("a") as out:
        out.write(f"{bundle.sums}: {len(checked.files)} {checked.layout} checked\n")
    bundle.target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{bundle.target.name}.partial-", dir=bundle.target.parent))
    try:
        if checked.layout == "wheels":
            wheels, debs = list(checked.files), []
        else:
            try:
                wheels, debs = _unpack(checked, building / "unpacked", _manifest(bundle))
            except tarfile.TarError as error:
                raise BundleError(f"the {checked.layout} checked but did not unpack as one tar: {error}") from None
        wheels, debs = select(wheels, bundle.only, bundle.exclude), select(debs, bundle.only, bundle.exclude)
        if not wheels and not debs:
            raise BundleError(f"only {list(bundle.only)} / exclude {list(bundle.exclude)} leave nothing to install")
        site = building / "site"
        site.mkdir()
        if wheels:
            left = limit_s - (time.monotonic() - started)
            outcome = groups.run_bounded(pip_words(site, wheels), env, building, log, left, signal.SIGTERM, 5)
            if outcome.timed_out or outcome.exit_code != 0:
                raise BundleError(f"pip install {'ran past the limit' if outcome.timed_out else 'failed'} "
                                  f"(exit {outcome.exit_code}): see the log")
        for deb in debs:
            try:
                extract_deb(deb, site / DEBROOT)
            except SystemExit as error:  # bundle.py's refusal of a package it cannot read
                raise BundleError(str(error)) from None
        (site / MARKER).write_text(json.dumps(_marker(bundle)) + "\n")
        site.chmod(0o755)
        if bundle.target.exists():
            bundle.target.rmdir()  # empty (checked above)
        site.rename(bundle.target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return (f"{len(wheels)} wheels{f' and {len(debs)} Debian packages' if debs else ''} from {len(checked.files)} "
            f"{checked.layout} installed into {bundle.target}")
