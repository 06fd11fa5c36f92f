"""What a differential run records, how a difference is judged, and the results table.

An adapter (one per foreign implementation, each in its own tox environment) runs every check it
can and writes golden/differential/<implementation>.json: per check, one entry per sub-case with

    equal       the foreign output equals ours within the check's stated tolerance;
    difference  an id naming how it differs (the adapter tries the known variants, e.g.
                "drops_last_frame"), or "unexplained";
    cannot_run  why the check does not run against this implementation.

Judging happens here, against conformance/cases/differential/pinned.yaml (an upstream difference
with its source file and line): a check is

    agree            every sub-case equal;
    differ (pinned)  some sub-case differs in a way pinned for this implementation and check;
    differ (new)     some sub-case differs in a way nobody pinned (a defect here, or a finding);
    cannot run       with why.

Numpy and the standard library only: the adapters import this beside their own pins.
"""

from __future__ import annotations

import hashlib
import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "golden" / "differential"
PINNED_FILE = ROOT / "conformance" / "cases" / "differential" / "pinned.yaml"

AGREE, PINNED, NEW, CANNOT = "agree", "differ (pinned)", "differ (new)", "cannot run"
UNEXPLAINED = "unexplained"

# The implementations, the tox environment that runs each, and the checks in table order.
IMPLEMENTATIONS = {
    "boson": "diff-boson",
    "transformers": "diff-transformers",
    "vllm-omni": "diff-vllm-omni",
    "vllm-omni-cpu": "upstream-cpu",
    "sglang-omni": "diff-sglang-omni",
}
CHECKS = ("delay_pattern", "state_machine", "talker_streams", "codec_decode", "encoder_codes", "talker2code2wav",
          "stream_offline", "request_validation", "long_input", "seeded_sampling", "abort")

# What the recorded results were computed from: our goldens and the oracles that wrote them, the
# reference modules the checks also run, the dummy weights, the seeded inputs and the adapters
# themselves. A change to any of them voids the foreign confirmation (judging and reporting do not).
# Every implementation's results depend on INPUT_FILES, and some on more (EXTRA_INPUT_FILES).
INPUT_FILES = (
    "conformance/cases/differential/inputs.yaml",
    "conformance/differential/inputs.py",
    "conformance/differential/delay_grids.py",
    "conformance/differential/state_machine.py",
    "conformance/differential/codec_cases.py",
    "conformance/differential/boson_encoder.py",
    "conformance/differential/adapter_boson.py",
    "conformance/differential/adapter_transformers.py",
    "conformance/differential/adapter_vllm_omni.py",
    "higgs_dummy/codec_weights.py",
    "higgs_dummy/encoder_weights.py",
    "reference/codec/encoder.py",
    "conformance/oracles/delay_numpy.py",
    "conformance/oracles/codec_numpy.py",
    "conformance/oracles/talker_contract.py",
    "reference/codec/delay_pattern.py",
    "conformance/codec/codec_cases.py",
    "conformance/cases/codec/decode.yaml",
    "golden/codec/*.json",
    "golden/talker/streams.json",
)
EXTRA_INPUT_FILES = {
    # sglang-omni's pieces on our inputs, and its loaders on the 4b dummy's parts
    "sglang-omni": (
        "conformance/differential/adapter_sglang_omni.py",
        "higgs_dummy/checkpoint.py",
        "higgs_dummy/tokenizer.py",
        "reference/talker/prompts.py",
    ),
    # upstream's talker run on our prompts and dummy checkpoints, named against our oracle
    "vllm-omni-cpu": (
        "conformance/differential/adapter_vllm_omni_cpu.py",
        "conformance/differential/upstream_cpu_*.py",
        "conformance/differential/talker_streams.py",
        "conformance/differential/engine_checks.py",
        "conformance/differential/stream_offline.py",
        "conformance/cases/codec/streaming.yaml",
        "reference/codec/streaming.py",
        "conformance/cases/talker/prompts.yaml",
        "conformance/cases/talker/seeded.yaml",
        "conformance/oracles/talker_torch.py",
        "reference/talker/prompts.py",
        "higgs_dummy/checkpoint.py",
    ),
}


@dataclass
class SubCase:
    id: str
    equal: bool
    difference: str | None = None  # None when equal
    detail: str = ""


@dataclass
class Check:
    check: str
    tolerance: str = ""
    cannot_run: str | None = None
    cases: list[SubCase] = field(default_factory=list)

    def add(self, case_id: str, difference: str | None, detail: str = "") -> None:
        self.cases.append(SubCase(case_id, difference is None, difference, detail))


def _talker_rows(doc: dict[str, Any]) -> dict[str, Any]:
    """What the differential checks read of the talker goldens: each stream's rows and ending (not
    its measured margins, which move in the last digits from one CPU to another)."""
    groups = {"": doc["streams"], **{f"{flavour}/": streams for flavour, streams in doc["flavours"].items()}}
    return {prefix + sid: [s["rows"], s["finished"]] for prefix, streams in groups.items() for sid, s in streams.items()}


def input_files(implementation: str | None = None) -> tuple[str, ...]:
    """The path patterns an implementation's recorded results were computed from."""
    return INPUT_FILES + EXTRA_INPUT_FILES.get(implementation or "", ())


def inputs_sha256(root: Path = ROOT, implementation: str | None = None) -> str:
    """sha256 over the implementation's input files (a golden JSON without its `provenance`, which
    names tool versions)."""
    h = hashlib.sha256()
    for pattern in input_files(implementation):
        for path in sorted(root.glob(pattern)):
            data = path.read_bytes()
            if path.suffix == ".json":
                doc = json.loads(data)
                doc.pop("provenance", None)
                if path.name == "streams.json":
                    doc = _talker_rows(doc)
                data = json.dumps(doc, sort_keys=True).encode()
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + data)
    return h.hexdigest()


def write_results(implementation: str, versions: dict[str, str], checks: list[Check],
                  results_dir: Path = RESULTS_DIR, ran: dict[str, Any] | None = None) -> Path:
    """Writes <results_dir>/<implementation>.json; `ran` says what ran, where an adapter has more to say."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {implementation!r}: one of {sorted(IMPLEMENTATIONS)}")
    doc = {
        "implementation": implementation,
        "env": IMPLEMENTATIONS[implementation],
        "command": f"tox -e {IMPLEMENTATIONS[implementation]}",
        "versions": {"python": platform.python_version(), **versions},
        "inputs_sha256": inputs_sha256(implementation=implementation),
        **({"ran": ran} if ran else {}),
        "checks": [asdict(c) for c in checks],
    }
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{implementation}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def read_results(implementation: str, results_dir: Path = RESULTS_DIR) -> dict[str, Any] | None:
    path = results_dir / f"{implementation}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def read_pins(path: Path = PINNED_FILE) -> list[dict[str, Any]]:
    """The pinned upstream differences (conformance/cases/differential/pinned.yaml)."""
    import yaml  # every environment that judges has PyYAML (the main one, and tox's own for the adapters)

    return yaml.safe_load(path.read_text())["pinned"]


def judge(implementation: str, check: dict[str, Any], pins: list[dict[str, Any]]) -> tuple[str, str]:
    """One recorded check -> (status, why): the status is one of AGREE, PINNED, NEW, CANNOT."""
    if check.get("cannot_run"):
        return CANNOT, check["cannot_run"]
    cases = check["cases"]
    if not cases:
        return CANNOT, "no sub-case ran"
    pinned = {p["difference"]: p for p in pins if p["implementation"] == implementation and p["check"] == check["check"]}
    differing = [c for c in cases if not c["equal"]]
    new = [c for c in differing if c["difference"] not in pinned]
    if new:
        first = new[0]
        kinds = ", ".join(sorted({c["difference"] for c in new}))
        return NEW, f"{len(new)}/{len(cases)} differ ({kinds}); first {first['id']}: {first['detail']}"
    if differing:
        kinds = sorted({c["difference"] for c in differing})
        where = "; ".join(f"{k} on {sum(c['difference'] == k for c in differing)}/{len(cases)}, "
                          f"pin {pinned[k]['id']} ({pinned[k]['source']})" for k in kinds)
        return PINNED, where
    return AGREE, f"{len(cases)}/{len(cases)} equal ({check['tolerance']})"


def table(results_dir: Path = RESULTS_DIR, pins: list[dict[str, Any]] | None = None,
          current_inputs: dict[str, str] | None = None) -> list[str]:
    """The results table as text lines: one row per check, one column per implementation;
    `current_inputs`: implementation -> its inputs' hash now (default: computed)."""
    pins = read_pins() if pins is None else pins
    if current_inputs is None:
        current_inputs = {impl: inputs_sha256(implementation=impl) for impl in IMPLEMENTATIONS}
    recorded = {impl: read_results(impl, results_dir) for impl in IMPLEMENTATIONS}
    lines, notes = [], []
    width = max(len(c) for c in CHECKS)
    lines.append(f"{'check':<{width}}  " + "  ".join(f"{impl:<16}" for impl in IMPLEMENTATIONS))
    for name in CHECKS:
        cells = []
        for impl, doc in recorded.items():
            if doc is None:
                status, why = CANNOT, f"no results: run `tox -e {IMPLEMENTATIONS[impl]}`"
            elif doc["inputs_sha256"] != current_inputs[impl]:
                status, why = CANNOT, f"stale results (goldens or oracles changed): run `tox -e {IMPLEMENTATIONS[impl]}`"
            else:
                found = [c for c in doc["checks"] if c["check"] == name]
                status, why = judge(impl, found[0], pins) if found else (CANNOT, "not recorded")
            cells.append(f"{status:<16}")
            notes.append(f"{name} x {impl}: {status}: {why}")
        lines.append(f"{name:<{width}}  " + "  ".join(cells))
    return lines + notes


if __name__ == "__main__":
    print("\n".join(table()))
