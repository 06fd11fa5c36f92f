"""What a sitting leaves: a results folder with results.json (every step of the plan, in order: its status,
duration, limit, command, exit code, log, and how its processes were stopped), RESULTS.md (the same, short),
each step's log, and the folders the steps wrote ({dir}). Written after every step, so a sitting killed
outright still leaves what it had done. `pack` makes one .tar.gz of the folder (the device tool brings back
at most 8 files)."""

from __future__ import annotations

import datetime
import json
import tarfile
from dataclasses import asdict, dataclass
from pathlib import Path

OK, FAILED, SKIPPED, OUT_OF_BUDGET = "ok", "failed", "skipped", "not-run-out-of-budget"
STATUSES = (OK, FAILED, SKIPPED, OUT_OF_BUDGET)


@dataclass
class Record:
    id: str
    kind: str  # bundle, run (a work item) or server
    limit_s: float  # a bundle's or work item's timeout_s, a server's boot_timeout_s
    command: str  # as it ran, placeholders filled; as planned where it did not start
    status: str = ""  # one of STATUSES once decided
    reason: str = ""  # why it failed, was skipped or not run; what it did
    started_s: float | None = None  # from the sitting's start
    duration_s: float | None = None  # a server's: its boot, until healthy
    exit_code: int | None = None
    log: str | None = None  # relative to the results folder
    stop: str = ""  # how its processes were ended
    pid: int | None = None  # a server's process and group id


class Results:
    def __init__(self, folder: Path, plan_path: Path, budget_s: float, reserve_s: float, records: list[Record]):
        self.folder, self.plan_path, self.budget_s, self.reserve_s = folder, plan_path, budget_s, reserve_s
        self.records = {r.id: r for r in records}
        self.started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.state = "running"
        self.elapsed_s = 0.0

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.records.values()) for s in STATUSES}

    def as_json(self) -> dict:
        return {"plan": str(self.plan_path), "started": self.started, "state": self.state,
                "budget_s": self.budget_s, "reserve_s": self.reserve_s, "elapsed_s": round(self.elapsed_s, 1),
                "counts": self.counts(), "steps": [asdict(r) for r in self.records.values()]}

    def markdown(self) -> str:
        c = self.counts()
        lines = [f"# Sitting {self.plan_path.stem} ({self.plan_path})", "",
                 f"{self.state}: {c[OK]} ok, {c[FAILED]} failed, {c[SKIPPED]} skipped, {c[OUT_OF_BUDGET]} not run "
                 f"(out of budget); {self.elapsed_s:.0f} s of a {self.budget_s:g} s budget; started {self.started}", "",
                 "| step | status | took | limit | exit | log |", "|---|---|---|---|---|---|"]
        for r in self.records.values():
            took = "" if r.duration_s is None else f"{r.duration_s:.1f} s"
            exit_code = "" if r.exit_code is None else str(r.exit_code)
            lines.append(f"| {r.id} | {r.status} | {took} | {r.limit_s:g} s | {exit_code} | {r.log or ''} |")
        lines.append("")
        for r in self.records.values():
            if r.reason:
                first, *rest = r.reason.splitlines()
                lines.append(f"- {r.id}: {first}")
                lines += [f"      {line}" for line in rest]
            if r.stop:
                lines.append(f"- {r.id} stopped: {r.stop}")
        return "\n".join(lines) + "\n"

    def write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        texts = {"results.json": json.dumps(self.as_json(), indent=1) + "\n", "RESULTS.md": self.markdown()}
        for name, text in texts.items():
            partial = self.folder / f".{name}.partial"
            partial.write_text(text)
            partial.replace(self.folder / name)


def pack(folder: Path, tar_path: Path) -> Path:
    """The results folder as one .tar.gz (its files under the folder's name)."""
    tar_path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    return tar_path
