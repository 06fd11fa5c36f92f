"""The offline-GPU bundle (conformance/tools/bundle.py) without the registry: what travels, the
platform tags, parts and their checksums, and the install's refusal of a missing or damaged part."""

import hashlib

import pytest

from conformance.tools import bundle


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
    with pytest.raises(SystemExit, match="name --vllm X, --with REQ"):
        bundle.main(["build", "--host", str(tmp_path / "host.txt"), str(tmp_path / "out")])
