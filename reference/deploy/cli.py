"""Resolve a deploy file for a platform and print every value with its origin; run the checks
that need no engine (runner per platform, stream = offline agreement of the geometry, warnings,
fail-fast errors).

    python -m reference.deploy FILE|NAME --platform cuda [--set key=value ...] [--json]

FILE is any deploy file in vllm-omni's format (ours or upstream's); NAME a profile in
reference/deploy/profiles/ (default, low_latency, high_throughput, low_latency_v2,
high_throughput_v2, h200_v2, many_streams_v2). `--set` takes dotted
keys of the format, the value read as YAML (`--set stages.0.max_num_seqs=32`,
`--set features.full_decode_cudagraphs=false`, `--set connectors.talker_to_code2wav.extra.codec_chunk_frames=50`,
`--set model_runner=v1`). Values that nobody set are marked "default". Exit status 2 and the
error on stderr when the file or the combination is invalid.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from typing import Any, Sequence

import yaml

from reference.deploy.platform_matrix import PLATFORMS
from reference.deploy.readback import expected_build
from reference.deploy.resolve import ResolvedDeployment, resolve_deployment
from reference.deploy.stream_check import check_stream


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {item!r}")
        overrides[key.strip()] = yaml.safe_load(text) if text.strip() else None
    return overrides


def _flat(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        out: list[tuple[str, Any]] = []
        for k, v in value.items():
            out += _flat(f"{prefix}.{k}" if prefix else str(k), v)
        return out
    return [(prefix, value)]


def _origin(d: ResolvedDeployment, key: str) -> str:
    while key and key not in d.origins:  # a value inside a whole-replaced mapping
        key = key.rpartition(".")[0]
    return d.origins.get(key, "")


def runners_by_platform(profile: str, overrides: dict[str, Any]) -> dict[str, str]:
    """platform -> resolved runner, or "error: ..." (warnings of these extra resolutions not logged)."""
    out: dict[str, str] = {}
    log = logging.getLogger("higgs_ref.deploy")
    level, log.level = log.level, logging.ERROR
    try:
        for platform in PLATFORMS:
            try:
                out[platform] = resolve_deployment(profile, platform, overrides).runner
            except ValueError as exc:
                out[platform] = f"error: {type(exc).__name__}"
    finally:
        log.level = level
    return out


def render(d: ResolvedDeployment, runners: dict[str, str] | None = None) -> str:
    """Text report: one `key = value  # origin` line per value, then the checks."""
    lines = [f"# {d.profile} on platform {d.platform}", ""]
    rows = [("runner", d.runner, d.origins["runner"])]
    rows += [(k, v, _origin(d, k)) for k, v in _flat("", d.config)]
    rows += [(f"options.{k}", v, d.origins[f"options.{k}"]) for k, v in d.options.to_dict().items() if k != "runner"]
    width = max(len(f"{k} = {json.dumps(v, default=str)}") for k, v, _ in rows)
    for key, value, origin in rows:
        text = f"{key} = {json.dumps(value, default=str)}"
        lines.append(f"{text.ljust(width)}  # {origin}")
    lines += ["", "# derived for the launcher"]
    lines += [f"geometry = {json.dumps(asdict(d.geometry))}  # connector {d.geometry_connector}"]
    lines += [f"env.{k} = {json.dumps(v)}" for k, v in d.env.items()]
    lines += [f"engine_kwargs.{k} = {json.dumps(v, default=str)}" for k, v in _flat("", d.engine_kwargs)]
    lines += [f"default_sampling_params = {json.dumps(d.default_sampling_params)}"]
    lines += [f"codec_stage = {json.dumps(d.codec_stage, default=str)}"]
    lines += ["", "# what vLLM must build (read back from the workers after boot: reference/deploy/readback.py)"]
    build = [(f"build.{k}", "(vLLM default, not compared)" if not e.compared else json.dumps(e.value), e.origin)
             for k, e in expected_build(d).items()]
    width = max(len(f"{k} = {v}") for k, v, _ in build)
    lines += [f"{f'{k} = {v}'.ljust(width)}  # {o}" if o != "vLLM default" else f"{k} = {v}" for k, v, o in build]
    lines += ["", "# checks"]
    lines += [f"stream: {check_stream(d.geometry).summary()}"]
    if runners:
        lines += ["runner by platform: " + ", ".join(f"{p} {r}" for p, r in runners.items())]
    lines += [f"warning: {w}" for w in d.warnings] or ["warnings: none"]
    return "\n".join(lines) + "\n"


def as_json(d: ResolvedDeployment, runners: dict[str, str] | None = None) -> str:
    check = check_stream(d.geometry)
    return json.dumps(
        {
            "profile": d.profile,
            "platform": d.platform,
            "runner": d.runner,
            "runner_by_platform": runners,
            "geometry": asdict(d.geometry),
            "geometry_connector": d.geometry_connector,
            "stream_equals_offline": check.exact,
            "measured": asdict(check.measured) if check.measured else None,
            "options": d.options.to_dict(),
            "engine_kwargs": d.engine_kwargs,
            "env": d.env,
            "default_sampling_params": d.default_sampling_params,
            "codec_stage": d.codec_stage,
            "build": {k: {"value": e.value, "origin": e.origin, "compared": e.compared}
                      for k, e in expected_build(d).items()},
            "config": d.config,
            "origins": d.origins,
            "warnings": list(d.warnings),
        },
        indent=2,
        default=str,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference.deploy", description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default="default", help="a deploy file, or a name in reference/deploy/profiles/")
    parser.add_argument("--platform", default="cuda", choices=list(PLATFORMS))
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    try:
        overrides = parse_set(args.sets)
        resolved = resolve_deployment(args.file, args.platform, overrides)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runners = runners_by_platform(args.file, overrides)
    sys.stdout.write(as_json(resolved, runners) + "\n" if args.json else render(resolved, runners))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
