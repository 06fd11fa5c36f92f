"""Print the fully resolved deployment for a profile on a platform, with the origin of each value.

    python -m reference.deploy --profile default --platform cuda [--set key=value ...] [--json]

`--set` takes dotted keys of the profile schema (reference/deploy/schema.py); the value is read
as YAML (`--set max_num_seqs=32`, `--set features.full_decode_cudagraphs=false`,
`--set stages.1.device=cuda:1`). Values that no file, platform section or override set are
marked "default". Exit status 2 and the error on stderr when the combination is invalid.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any, Sequence

import yaml

from reference.deploy.resolve import ResolvedDeployment, resolve_deployment
from reference.deploy.platform_matrix import PLATFORMS


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


def render(d: ResolvedDeployment) -> str:
    """Text report: one `key = value  # origin` line per value."""
    lines = [f"# profile {d.profile} on platform {d.platform}", ""]
    rows = [("runner", d.runner, d.origins["runner"])]
    rows += [(k, v, d.origins.get(k, "")) for k, v in _flat("", d.config) if k != "model_runner"]
    rows.insert(0, ("model_runner", d.config["model_runner"], d.origins["model_runner"]))
    rows += [(f"options.{k}", v, d.origins[f"options.{k}"]) for k, v in d.options.to_dict().items() if k != "runner"]
    width = max(len(f"{k} = {json.dumps(v)}") for k, v, _ in rows)
    for key, value, origin in rows:
        text = f"{key} = {json.dumps(value)}"
        lines.append(f"{text.ljust(width)}  # {origin}")
    lines += ["", "# derived for the launcher"]
    lines += [f"geometry = {json.dumps(asdict(d.geometry))}"]
    lines += [f"env.{k} = {json.dumps(v)}" for k, v in d.env.items()]
    lines += [f"engine_kwargs.{k} = {json.dumps(v)}" for k, v in _flat("", d.engine_kwargs)]
    lines += [f"default_sampling_params = {json.dumps(d.default_sampling_params)}"]
    lines += [f"# warning: {w}" for w in d.warnings]
    return "\n".join(lines) + "\n"


def as_json(d: ResolvedDeployment) -> str:
    return json.dumps(
        {
            "profile": d.profile,
            "platform": d.platform,
            "runner": d.runner,
            "geometry": asdict(d.geometry),
            "options": d.options.to_dict(),
            "engine_kwargs": d.engine_kwargs,
            "env": d.env,
            "default_sampling_params": d.default_sampling_params,
            "config": d.config,
            "origins": d.origins,
            "warnings": list(d.warnings),
        },
        indent=2,
        default=str,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference.deploy", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="default", help="a name in reference/deploy/profiles/ or a path")
    parser.add_argument("--platform", default="cuda", choices=list(PLATFORMS))
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    try:
        resolved = resolve_deployment(args.profile, args.platform, parse_set(args.sets))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(as_json(resolved) + "\n" if args.json else render(resolved))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
