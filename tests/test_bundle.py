"""The offline-GPU bundle (conformance/tools/bundle.py) without the registry: what travels, the
platform tags, parts and their checksums, and the install's refusal of a missing, damaged or
mismatched stage, which leaves the target as it was."""

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conformance.tools import bundle


def stage_bundle(tmp_path: Path, wheels: dict[str, bytes], debs: dict[str, bytes] | None = None,
                 part_bytes: int = 4096) -> Path:
    """A staged bundle as `build` writes one (parts, SHA256SUMS, MANIFEST.json) of these files."""
    folders = {}
    for kind, files in (("w", wheels), ("deb", debs or {})):
        folders[kind] = tmp_path / f"src-{kind}"
        folders[kind].mkdir(exist_ok=True)
        for name, data in files.items():
            (folders[kind] / name).write_bytes(data)
    stage = tmp_path / "stage"
    parts = bundle.write_parts(folders["w"], stage, part_bytes=part_bytes, debs=folders["deb"])
    (stage / bundle.MANIFEST).write_text(json.dumps({
        "parts": parts, "wheels": {n: len(d) for n, d in sorted(wheels.items())},
        "debs": {n: len(d) for n, d in sorted((debs or {}).items())}}))
    return stage


def fake_wheel(path: Path, files: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in (files or {"pkg/__init__.py": ""}).items():
            wheel.writestr(name, text)
    return path


def test_only_packages_the_host_lacks_at_that_version_travel():
    have = bundle.parse_host("torch==2.11.0+cu130\nnumpy==2.5.2\nNVIDIA_nccl.cu13==2.28.9\n# comment\n")
    needed = [("numpy", "2.5.2"), ("nvidia-nccl-cu13", "2.30.7"), ("torch", "2.11.0"), ("vllm", "0.33.0")]
    travel, left_out = bundle.split(needed, have)
    assert left_out == ["numpy==2.5.2"]
    assert travel == [("nvidia-nccl-cu13", "2.30.7"), ("torch", "2.11.0"), ("vllm", "0.33.0")]  # +cu130 differs


def test_the_tags_reach_from_the_hosts_glibc_down_to_manylinux_2_17_and_2_25():
    args = bundle.platform_args("3.12", "2.39")
    tags = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    for tag in ("manylinux_2_39_x86_64", "manylinux_2_28_x86_64", "manylinux_2_25_x86_64", "manylinux_2_18_x86_64",
                "manylinux_2_17_x86_64", "manylinux2014_x86_64"):
        assert tag in tags
    assert "manylinux_2_40_x86_64" not in tags
    assert args[args.index("--python-version") + 1] == "3.12" and "cp312" in args


def test_parts_are_at_most_the_part_size_and_rejoin_into_the_wheels(tmp_path):
    wheels = tmp_path / "w"
    wheels.mkdir()
    payload = {f"pkg{i}-1.0-py3-none-any.whl": bytes([i]) * (3000 + 1000 * i) for i in range(4)}
    for name, data in payload.items():
        (wheels / name).write_bytes(data)
    out = tmp_path / "out"
    parts = bundle.write_parts(wheels, out, part_bytes=4096)
    (out / bundle.MANIFEST).write_text(json.dumps({"parts": parts}))
    assert parts[:2] == ["part-aa", "part-ab"] and len(parts) > 3
    assert all((out / p).stat().st_size <= 4096 for p in parts)
    assert bundle.verify(out) == parts
    joined = b"".join((out / p).read_bytes() for p in parts)
    assert all(hashlib.sha256(d).digest() and d in joined for d in payload.values())

    (out / parts[1]).write_bytes(b"damaged")
    with pytest.raises(SystemExit, match="part-ab .* does not match SHA256SUMS"):
        bundle.verify(out)
    (out / parts[1]).unlink()
    with pytest.raises(SystemExit, match="part-ab is missing"):
        bundle.verify(out)


def test_a_build_names_what_it_bundles(tmp_path):
    (tmp_path / "host.txt").write_text("numpy==2.5.2\n")
    with pytest.raises(SystemExit, match="name --vllm X, --with REQ..., --add, --deb"):
        bundle.main(["build", "--host", str(tmp_path / "host.txt"), str(tmp_path / "out")])


def test_a_bundles_manifest_shadows_the_host_list_as_on_pythonpath(tmp_path):
    (tmp_path / "host.txt").write_text("numpy==2.5.2\nscipy==1.18.1\n")
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"wheels": {
        "numpy-2.3.5-cp312-cp312-manylinux_2_27_x86_64.whl": 1, "vllm-0.33.0-cp38-abi3-manylinux_2_31_x86_64.whl": 2}}))
    have = bundle.read_hosts([tmp_path / "host.txt", tmp_path / "MANIFEST.json"])
    assert have == {"numpy": "2.3.5", "scipy": "1.18.1", "vllm": "0.33.0"}


def test_prefer_host_keeps_the_hosts_versions_and_pins_the_rest():
    have = {"scipy": "1.18.1", "numpy": "2.3.5", "librosa": "0.11.0"}
    requirements, constraints, notes = bundle.prefer_host(["jiwer==4.0.0", "scipy==1.17.1", "librosa==0.11.0"], have)
    assert requirements == ["jiwer==4.0.0", "scipy==1.18.1", "librosa==0.11.0"]
    assert constraints == {"numpy": "2.3.5"}  # the requirements' own names are not constrained twice
    assert notes == ["scipy==1.17.1: the host's 1.18.1 kept"]


def test_quality_debs_carry_espeak_ng_and_leave_glibc_to_the_host():
    assert {"espeak-ng", "espeak-ng-data", "libespeak-ng1", "libpcaudio0", "libsonic0"} <= set(bundle.QUALITY_DEBS)
    assert not {"libc6", "libc-bin", "libgcc-s1"} & set(bundle.QUALITY_DEBS)


def fake_deb(path, files: dict[str, bytes], compression: str = "xz"):
    """A Debian package as dpkg-deb writes one: an ar archive of debian-binary, control and data."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode=f"w:{compression}") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode = len(body), 0o755
            tar.addfile(info, io.BytesIO(body))
        link = tarfile.TarInfo("./usr/lib/x86_64-linux-gnu/libfake.so.1")
        link.type, link.linkname = tarfile.SYMTYPE, "libfake.so.1.0"
        tar.addfile(link)
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b"x" * 3), (f"data.tar.{compression}", data.getvalue())]
    out = b"!<arch>\n"
    for name, body in members:
        out += f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode() + body + b"\n" * (len(body) % 2)
    path.write_bytes(out)
    return path


def test_a_deb_unpacks_into_its_root_as_dpkg_x_does(tmp_path):
    deb = fake_deb(tmp_path / "fake_1.0_amd64.deb", {"usr/bin/espeak-ng": b"#!/bin/sh\n",
                                                     "usr/lib/x86_64-linux-gnu/libfake.so.1.0": b"elf"})
    names = bundle.extract_deb(deb, tmp_path / "root")
    assert "./usr/bin/espeak-ng" in names
    assert (tmp_path / "root/usr/bin/espeak-ng").read_bytes() == b"#!/bin/sh\n"
    assert (tmp_path / "root/usr/lib/x86_64-linux-gnu/libfake.so.1").resolve().name == "libfake.so.1.0"
    (tmp_path / "not.deb").write_bytes(b"PK\x03\x04")
    with pytest.raises(SystemExit, match="not.deb is not a Debian package"):
        bundle.extract_deb(tmp_path / "not.deb", tmp_path / "root")


def test_a_bundle_of_debs_alone_installs_into_the_targets_debroot(tmp_path, capsys):
    debs = tmp_path / "deb"
    debs.mkdir()
    fake_deb(debs / "espeak-ng_1.51_amd64.deb", {"usr/bin/espeak-ng": b"#!/bin/sh\n"}, compression="gz")
    fake_deb(debs / "espeak-ng-data_1.51_amd64.deb", {"usr/lib/x86_64-linux-gnu/espeak-ng-data/phontab": b"p"})
    stage = stage_bundle(tmp_path, {}, {d.name: d.read_bytes() for d in debs.iterdir()})
    parts = json.loads((stage / bundle.MANIFEST).read_text())["parts"]
    assert parts and bundle.verify(stage) == parts
    target = bundle.install(stage, tmp_path / "quality")
    assert target == tmp_path / "quality"
    assert (target / "debroot/usr/bin/espeak-ng").exists()
    assert (target / "debroot/usr/lib/x86_64-linux-gnu/espeak-ng-data/phontab").read_bytes() == b"p"
    assert f"export HIGGS_ESPEAK_NG_ROOT={target / 'debroot'}" in capsys.readouterr().out
    assert not (stage / "unpacked").exists()


def test_a_quality_build_beside_a_vllm_bundle_carries_only_what_neither_has(tmp_path, monkeypatch):
    """`build --with ... --add ... --deb ... --prefer-host --host host.txt --host MANIFEST.json`,
    the registry and apt replaced by stand-ins."""
    (tmp_path / "host.txt").write_text("scipy==1.18.1\nnumpy==2.5.2\n")
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"wheels": {"numpy-2.3.5-cp312-cp312-x.whl": 1}}))
    asked = {}

    def resolve(requirements, python, glibc, constraints=None, find_links=()):
        asked.update(requirements=requirements, constraints=constraints)
        return bundle.Resolution([("jiwer", "4.0.0"), ("numpy", "2.3.5"), ("rapidfuzz", "3.14.6"), ("scipy", "1.18.1")],
                                 {}, {})

    def run(command, check=False, **kwargs):
        folder = Path(command[command.index("-d") + 1])
        folder.mkdir(parents=True, exist_ok=True)
        for requirement in [a for a in command if "==" in a]:  # the pins after pip's options
            name, version = requirement.split("==")
            fake_wheel(folder / f"{name}-{version}-py3-none-any.whl")

    def download_debs(packages, folder):
        folder.mkdir(parents=True)
        for package in packages:
            fake_deb(folder / f"{package}_1_amd64.deb", {f"usr/share/{package}": b"d"})

    monkeypatch.setattr(bundle, "resolve", resolve)
    monkeypatch.setattr(bundle.subprocess, "run", run)
    monkeypatch.setattr(bundle, "download_debs", download_debs)
    out = tmp_path / "out"
    bundle.main(["build", "--with", "jiwer==4.0.0", "scipy==1.17.1", "--add", "resemblyzer==0.1.4", "--deb", "espeak-ng",
                 "--prefer-host", "--host", str(tmp_path / "host.txt"), "--host", str(tmp_path / "MANIFEST.json"), str(out)])
    assert asked == {"requirements": ["jiwer==4.0.0", "scipy==1.18.1"], "constraints": {"numpy": "2.3.5"}}
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert sorted(manifest["wheels"]) == ["jiwer-4.0.0-py3-none-any.whl", "rapidfuzz-3.14.6-py3-none-any.whl",
                                          "resemblyzer-0.1.4-py3-none-any.whl"]
    assert list(manifest["debs"]) == ["espeak-ng_1_amd64.deb"]
    assert manifest["left_out_host_has"] == ["numpy==2.3.5", "scipy==1.18.1"]
    assert manifest["host_versions_kept"] == ["scipy==1.17.1: the host's 1.18.1 kept"]
    assert bundle.verify(out) == manifest["parts"]


def test_a_resolve_under_another_python_than_the_hosts_is_refused_naming_the_interpreter():
    """pip would evaluate the dependencies' markers for the running Python, not the host's."""
    bundle.check_interpreter("3.12", running=(3, 12))
    with pytest.raises(SystemExit, match=r"host's Python is 3\.12, this is 3\.11: run the build under Python 3\.12"):
        bundle.check_interpreter("3.12", running=(3, 11))


def _deb_stage(tmp_path: Path, name: str = "espeak-ng_1.51_amd64.deb") -> Path:
    tmp_path.mkdir(exist_ok=True)
    fake_deb(tmp_path / name, {"usr/bin/espeak-ng": b"#!/bin/sh\n" + b"x" * 6000})
    return stage_bundle(tmp_path, {}, {name: (tmp_path / name).read_bytes()})


def _refused(stage: Path, target: Path, match: str) -> None:
    before = sorted(p.relative_to(target) for p in target.rglob("*")) if target.exists() else None
    with pytest.raises(SystemExit, match=match):
        bundle.install(stage, target)
    after = sorted(p.relative_to(target) for p in target.rglob("*")) if target.exists() else None
    assert after == before, "a refused install touched the target"
    assert not list(target.parent.glob(f".{target.name}.partial-*")) and not (stage / "unpacked").exists()


def test_a_damaged_stage_is_refused_and_the_target_is_untouched(tmp_path):
    stage = _deb_stage(tmp_path)
    part = stage / "part-ab"
    good = part.read_bytes()
    part.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    _refused(stage, tmp_path / "new-target", "part-ab .* does not match SHA256SUMS")
    part.write_bytes(good)
    (stage / "SHA256SUMS").unlink()
    _refused(stage, tmp_path / "new-target", "has no SHA256SUMS")


def test_a_stage_mixing_two_bundles_is_refused_and_the_target_is_untouched(tmp_path):
    one, other = _deb_stage(tmp_path / "one"), _deb_stage(tmp_path / "other", "libsonic0_1_amd64.deb")
    target = tmp_path / "target"
    # A part of another bundle beside this one's.
    (one / "part-zz").write_bytes((other / "part-aa").read_bytes())
    _refused(one, target, "part-zz .* not in SHA256SUMS: a part of another bundle")
    (one / "part-zz").unlink()
    # This bundle's parts and checksums with another bundle's manifest (same part names, other contents).
    manifest = json.loads((one / bundle.MANIFEST).read_text())
    (one / bundle.MANIFEST).write_text((other / bundle.MANIFEST).read_text())
    _refused(one, target, r"the parts hold debs \['espeak-ng_1.51_amd64.deb'\], MANIFEST.json lists "
                          r"\['libsonic0_1_amd64.deb'\]")
    (one / bundle.MANIFEST).write_text(json.dumps({**manifest, "parts": ["part-aa"]}))
    _refused(one, target, "MANIFEST.json in .* names the parts \\['part-aa'\\], SHA256SUMS \\['part-aa', 'part-ab'")


def test_a_target_that_holds_files_is_refused_untouched_and_an_install_lands_whole(tmp_path):
    stage = _deb_stage(tmp_path)
    target = tmp_path / "quality"
    target.mkdir()
    (target / "earlier.txt").write_text("an earlier install")
    _refused(stage, target, "quality is not empty: install into a new folder")
    (target / "earlier.txt").unlink()
    assert bundle.install(stage, target) == target
    assert (target / "debroot/usr/bin/espeak-ng").exists()
    assert [p.name for p in target.parent.iterdir() if p.name.startswith(".quality")] == []


def _resolution() -> bundle.Resolution:
    """app needs a, b and c[x]; a and b share `shared`; `only-a` is a's alone; c's extra x needs d."""
    requires = {"app": ["a>=1", "b", "c[x]; python_version >= '3'", "win-only; sys_platform == 'win32'"],
                "a": ["shared", "only-a"], "b": ["shared"], "c": ["d; extra == 'x'", "e; extra == 'y'"]}
    packages = [(n, "1.0") for n in ("a", "app", "b", "c", "d", "only-a", "shared")]
    return bundle.Resolution(packages, requires, {"python_version": "3.12", "sys_platform": "linux"})


def test_a_package_left_out_takes_with_it_only_what_it_alone_needed():
    kept, gone = bundle.leave_out(_resolution(), ["app==1.0"], {"A": "never imported"})
    assert [n for n, _ in kept] == ["app", "b", "c", "d", "shared"]
    assert gone == ["only-a==1.0"]  # `shared` stays: b needs it too
    kept, gone = bundle.leave_out(_resolution(), ["app==1.0"], {"c": "never imported"})
    assert gone == ["d==1.0"]  # needed only through c's extra


def test_a_left_out_name_the_resolve_lacks_or_a_walk_that_misses_a_package_is_refused():
    with pytest.raises(SystemExit, match="--leave-out onnxruntime: not in the resolve"):
        bundle.leave_out(_resolution(), ["app==1.0"], {"onnxruntime": "typo"})
    resolution = _resolution()
    resolution.requires["c"] = []  # pip resolved d, yet nothing now asks for it
    with pytest.raises(SystemExit, match="pip resolved d, which no walk of Requires-Dist from app==1.0 reaches"):
        bundle.leave_out(resolution, ["app==1.0"], {"a": "never imported"})


def test_a_stand_in_resolves_the_pinned_version_with_the_carried_wheels_requirements(tmp_path):
    """Real pip, offline: the pin 1.6.0rc5 resolves against the stand-in, whose Requires-Dist is 1.6.0's."""
    carried = fake_wheel(tmp_path / "cuda_tile-1.6.0-py3-none-any.whl", {
        "cuda/tile/__init__.py": "", "cuda_tile-1.6.0.dist-info/METADATA":
        "Metadata-Version: 2.1\nName: cuda-tile\nVersion: 1.6.0\nRequires-Dist: typing-extensions\n"})
    (tmp_path / "links").mkdir()
    wheel = bundle.stand_in(carried, "1.6.0rc5", tmp_path / "links")
    assert wheel.name == "cuda_tile-1.6.0rc5-py3-none-any.whl"
    report = tmp_path / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed", "--no-index",
                    "--no-deps", "--find-links", str(tmp_path / "links"), "--report", str(report),
                    "cuda-tile==1.6.0rc5"], check=True)
    [item] = json.loads(report.read_text())["install"]
    assert (item["metadata"]["version"], item["metadata"]["requires_dist"]) == ("1.6.0rc5", ["typing-extensions"])
    assert bundle.pth_files(wheel) == []


def test_a_recipe_builds_swaps_and_leaves_out_and_its_manifest_says_so(tmp_path, monkeypatch):
    """`build @ARGS`: the registry replaced by stand-ins; what each option did is in MANIFEST.json."""
    (tmp_path / "host.txt").write_text("shared==1.0\n")
    (tmp_path / "recipe.args").write_text(
        "--with app==1.0  # the requirement\n--build d==1.0\n"
        "--swap tile==1.0rc1=1.0\n--leave-out 'a=never imported'\n")
    calls = []

    def resolve(requirements, python, glibc, constraints=None, find_links=()):
        calls.append(("resolve", requirements, [p.name for p in find_links]))
        assert [w.name for w in find_links[-1].iterdir()] == ["tile-1.0rc1-py3-none-any.whl"]
        resolution = _resolution()
        resolution.packages.append(("tile", "1.0rc1"))
        resolution.requires["b"].append("tile")
        return resolution

    def run(command, check=False, **kwargs):
        calls.append((command[3], [a for a in command if "==" in a], "--find-links" in command))
        folder = Path(command[command.index("-w" if command[3] == "wheel" else "-d") + 1])
        folder.mkdir(parents=True, exist_ok=True)
        for requirement in [a for a in command if "==" in a]:
            name, version = requirement.split("==")
            meta = {f"{name}-{version}.dist-info/METADATA": f"Name: {name}\nVersion: {version}\n"}
            fake_wheel(folder / f"{name}-{version}-py3-none-any.whl",
                       meta | ({"c-paths.pth": "lib\n"} if name == "c" else {}))

    monkeypatch.setattr(bundle, "resolve", resolve)
    monkeypatch.setattr(bundle.subprocess, "run", run)
    out = tmp_path / "out"
    bundle.main(["build", f"@{tmp_path / 'recipe.args'}", "--host", str(tmp_path / "host.txt"), str(out)])
    assert calls[:3] == [("wheel", ["d==1.0"], False), ("download", ["tile==1.0"], False),
                         ("resolve", ["app==1.0"], ["built", "stand-ins"])]
    assert calls[3] == ("download", ["app==1.0", "b==1.0", "c==1.0", "d==1.0", "tile==1.0"], True)
    manifest = json.loads((out / "MANIFEST.json").read_text())
    assert manifest["left_out"] == {"a==1.0": "never imported"}
    assert manifest["left_out_with_them"] == ["only-a==1.0"]
    assert manifest["left_out_host_has"] == ["shared==1.0"]
    assert manifest["swapped"] == {"tile==1.0rc1": "1.0"}
    assert manifest["built_here"] == ["d-1.0-py3-none-any.whl"]
    assert manifest["pth_files"] == {"c-1.0-py3-none-any.whl": ["c-paths.pth"]}
    assert sorted(manifest["wheels"]) == [f"{n}-py3-none-any.whl" for n in ("app-1.0", "b-1.0", "c-1.0", "d-1.0", "tile-1.0")]


def test_the_recipe_options_refuse_what_they_cannot_read(tmp_path):
    (tmp_path / "host.txt").write_text("")
    for option, message in ((["--swap", "tile==1.0rc1"], "write NAME==X=Y"),
                            (["--leave-out", "a"], "write NAME=WHY")):
        with pytest.raises(SystemExit, match=message):
            bundle.main(["build", "--with", "app==1.0", *option, "--host", str(tmp_path / "host.txt"), str(tmp_path)])


def test_sglang_omnis_recipe_reads_with_a_reason_for_every_package_left_out():
    recipe = Path(bundle.__file__).parent / "sglang-omni-0.1.9.args"
    args = bundle.arguments().parse_args(["build", f"@{recipe}", "--host", "host.txt", "out"])
    assert args.extra == ["sglang-omni==0.1.9", "dill"] and "logger==1.4" in args.sdists  # --with lines add up
    assert [bundle.parse_swap(s) for s in args.swaps] == [("cuda-tile", "1.6.0rc5", "1.6.0")]
    reasons = dict(map(bundle.parse_leave_out, args.leave_out))
    assert "nvidia-cutlass-dsl" in reasons and "torch" not in reasons and all(reasons.values())
