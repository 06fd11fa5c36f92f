"""Every deploy file of the installed vllm-omni wheel, resolved by our loader (the corpus).

    python -m conformance.deploy.upstream_deploy [--table | --loaders]

The wheel is data here: its deploy/ folder is found without importing vllm_omni
(conformance/deploy/deploy_cases.py). Each file is resolved for cuda and for every platform its
`platforms:` section names. An outcome is `resolved` or a refusal, by the kind of ValueError
(each names the file and the key):

  schema    DeployFileError: the file breaks the format (reference/deploy/schema.json) or a rule
            of the loader
  runner    RunnerUnavailable: an explicit V2 where the platform cannot run it
  sampling  SamplingParamsError: stage-0 sampling defaults the Higgs talker does not accept
            (files written for other models)
  switches  another ValueError of the talker rules (a V2 first chunk that is not window-aligned)

Anything else escaping is a crash: conformance/deploy/test_deploy_corpus.py fails on it. `--table`
prints the table of the Higgs v3 files on every platform (docs/upstream.md);
`--loaders` the loader cases of cases/profiles/upstream.yaml, ours beside upstream's own loader
(conformance/deploy/upstream_loader.py).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import tempfile
import time
from dataclasses import astuple, dataclass
from pathlib import Path

from conformance.deploy.deploy_cases import UPSTREAM_PIP, upstream_deploy_dir
from reference.deploy.loader import load_chain, merge_chain
from reference.deploy.platform_matrix import PLATFORMS, RunnerUnavailable
from reference.deploy.resolve import ResolvedDeployment, resolve_deployment
from reference.deploy.sampling import SamplingParamsError
from reference.deploy.schema import GEOMETRY_FRAME_KEYS, DeployFileError
from reference.deploy.stream_check import check_stream

HIGGS_V3 = (
    "higgs_multimodal_qwen3.yaml",
    "higgs_multimodal_qwen3_high_throughput.yaml",
    "higgs_multimodal_qwen3_low_latency.yaml",
)


@dataclass(frozen=True)
class Outcome:
    file: str
    platform: str
    status: str  # "resolved" | "schema" | "runner" | "sampling" | "switches"
    message: str = ""
    deployment: ResolvedDeployment | None = None


def classify(exc: ValueError) -> str:
    if isinstance(exc, DeployFileError):
        return "schema"
    if isinstance(exc, RunnerUnavailable):
        return "runner"
    if isinstance(exc, SamplingParamsError):
        return "sampling"
    return "switches"


@contextlib.contextmanager
def _quiet():
    """Warnings stay in ResolvedDeployment.warnings instead of the log while the corpus runs."""
    log = logging.getLogger("higgs_ref.deploy")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def platforms_of(path: Path) -> list[str]:
    """cuda, then the platforms the file's (merged) platforms: section names."""
    named = {p[1] for p in merge_chain(load_chain(path)) if p[0] == "platforms"}
    return ["cuda", *sorted(named - {"cuda"}, key=list(PLATFORMS).index)]


def resolve_file(path: Path, platforms: list[str] | None = None) -> list[Outcome]:
    """Outcomes of one file; only ValueErrors are outcomes, anything else propagates."""
    try:
        targets = platforms or platforms_of(path)
    except ValueError as exc:
        return [Outcome(path.name, "cuda", classify(exc), str(exc))]
    out = []
    for platform in targets:
        try:
            out.append(Outcome(path.name, platform, "resolved", deployment=resolve_deployment(path, platform)))
        except ValueError as exc:
            out.append(Outcome(path.name, platform, classify(exc), str(exc)))
    return out


def corpus(folder: Path) -> list[Outcome]:
    with _quiet():
        return [o for path in sorted(folder.glob("*.yaml")) for o in resolve_file(path)]


def summary(outcomes: list[Outcome]) -> list[str]:
    files = sorted({o.file for o in outcomes})
    refused = [o for o in outcomes if o.status != "resolved"]
    every = [f for f in files if all(o.status == "resolved" for o in outcomes if o.file == f)]
    lines = [
        f"{len(files)} files, {len(outcomes)} resolutions (cuda and each platform a file names): "
        f"{len(outcomes) - len(refused)} resolved, {len(refused)} refused; "
        f"{len(every)} files resolve on every platform they were tried on"
    ]
    for status in ("schema", "runner", "sampling", "switches"):
        hits = [o for o in refused if o.status == status]
        if hits:
            lines.append(f"  refused ({status}): {len(hits)} in {len({o.file for o in hits})} files")
            for o in hits:
                lines.append(f"    {o.file} on {o.platform}: {o.message.splitlines()[0]}")
    return lines


def higgs_rows(folder: Path) -> list[str]:
    """Markdown rows: each Higgs v3 file on every platform."""
    rows = [
        "| file | platform | runner | stage-0 engine args | codec batch | geometry | stream = offline | warnings |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in HIGGS_V3:
        with _quiet():
            outcomes = resolve_file(folder / name, list(PLATFORMS))
        for o in outcomes:
            if o.deployment is None:
                rows.append(f"| {name} | {o.platform} | refused: {o.message} | | | | | |")
                continue
            d = o.deployment
            k = d.engine_kwargs
            args = (
                f"{k.get('attention_backend', '-')}, seqs {k.get('max_num_seqs')}, len {k.get('max_model_len')}, "
                f"eager {str(k.get('enforce_eager')).lower()}, graphs {k['compilation_config']['cudagraph_mode']}"
            )
            check = check_stream(d.geometry)
            short = [f"left {check.left_short} short"] * bool(check.left_short)
            short += [f"holdback {check.right_short} short"] * bool(check.right_short)
            stream = "yes" if check.exact else f"no: {', '.join(short)}"
            if check.measured:
                stream += "; " + " / ".join(f"{v} dB" for v in check.measured.snr_db.values())
            geometry = "/".join(str(v) for v in astuple(d.geometry))
            warnings = "; ".join(w.split(" (")[0] for w in d.warnings)
            codec = (d.codec_stage or {}).get("max_num_seqs", "-")
            rows.append(
                f"| {name.removesuffix('.yaml')} | {o.platform} | {d.runner} | {args} | {codec} | {geometry} | "
                f"{stream} | {warnings or '-'} |"
            )
    return rows


def _geometry_of(result: dict, ours) -> str:
    if "error" in result:
        return result["error"].split(":")[0]
    name = getattr(ours, "geometry_connector", None)
    extra = (result["connectors"].get(name) or {}).get("extra") or {}
    return "/".join(str(extra.get(k, "-")) for k in GEOMETRY_FRAME_KEYS.values())


def loader_rows() -> list[str]:
    """Markdown rows: the loader cases of cases/profiles/upstream.yaml, ours beside upstream's loader."""
    from conformance.case_files import load
    from conformance.deploy.deploy_cases import fill
    from conformance.deploy.upstream_loader import compare, resolve_upstream
    from reference.deploy.loader import PROFILES_DIR

    rows = ["| case | platform | ours: runner, geometry | upstream: runner, geometry | differences |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp, _quiet():
        for case in load("profiles/upstream")["loader_cases"]:
            case = fill(case, tmp)
            path = Path(tmp) / f"{case['id']}.yaml"
            if "overlay" in case:
                path.write_text(case["overlay"])
            else:
                path = PROFILES_DIR / f"{case['profile']}.yaml" if "profile" in case else upstream_deploy_dir() / case["file"]
            for platform, theirs in zip(case["platforms"], resolve_upstream([(str(path), p) for p in case["platforms"]])):
                try:
                    ours = resolve_deployment(path, platform)
                    mine = f"{ours.runner}, {'/'.join(str(v) for v in astuple(ours.geometry))}"
                except ValueError as exc:
                    ours, mine = exc, type(exc).__name__
                other = theirs["error"].split(":")[0] if "error" in theirs else f"{theirs['runner']}, {_geometry_of(theirs, ours)}"
                diffs = "; ".join(compare(ours, theirs)) or "none"
                rows.append(f"| {case['id']} | {platform} | {mine} | {other} | {diffs} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="the table of the Higgs v3 files in docs/upstream.md")
    parser.add_argument("--loaders", action="store_true", help="ours beside upstream's own loader")
    args = parser.parse_args(argv)
    folder = upstream_deploy_dir()
    if folder is None:
        print(f"vllm-omni is not installed: run `{UPSTREAM_PIP}`")
        return 2
    start = time.perf_counter()
    lines = higgs_rows(folder) if args.table else loader_rows() if args.loaders else summary(corpus(folder))
    print("\n".join(lines))
    print(f"({time.perf_counter() - start:.1f} s, {folder})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
