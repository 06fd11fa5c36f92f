"""The results table per implementation (issue #32): every serving check pass, fail, not applicable or not run,
each with its reason, as JSON in golden/implementations/NAME.json and as a markdown table.

    python -m conformance.serving.results run --implementation NAME --server-url URL [-- PYTEST_ARGS]
    python -m conformance.serving.results not-run --implementation NAME --reason TEXT
    python -m conformance.serving.results table [--write docs/implementations.md]

`run` runs the serving checks (conformance/serving/) against the server at URL through the implementation's
adapter (conformance/serving/implementations.py) and writes its JSON; the checks that cannot judge it skip
with their reason and are "not applicable". `not-run` writes the JSON of an implementation that could not be
run here: each check "not applicable" where that is known without a server (the markers), else "not run"
with the reason given. `table` prints the table of every JSON there (a column per implementation), or
rewrites the table between the markers in a markdown file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from pathlib import Path

import pytest

from conformance.serving import implementations

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "golden" / "implementations"
CHECKS = "conformance/serving"
OUTCOMES = ("pass", "fail", "not applicable", "not run")
BEGIN, END = "<!-- implementation results: begin (python -m conformance.serving.results table --write) -->", \
    "<!-- implementation results: end -->"


def check_name(nodeid: str, implementation: str) -> str:
    """A check's id without the parameter naming the implementation (test_serving.py's `variant` at a URL)."""
    name = nodeid.replace(f"[{implementation}]", "")
    return name.replace(f"[{implementation}-", "[").replace(f"-{implementation}]", "]").replace(
        f"-{implementation}-", "-")


def _skip_reason(report) -> str:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


def printable(text: str) -> str:
    """`text` on one line, with any character that is not printable (a binary body quoted by an assertion) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in " ".join(text.split()))


def _failure(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return printable(crash.message if crash is not None else str(report.longrepr))[:300]


class Collector:
    """A pytest plugin for `--collect-only`: each check, "not applicable" where a marker already says why
    (conftest.py adds the skip), else "not run" with `reason`."""

    def __init__(self, implementation: str, reason: str):
        self.implementation, self.reason = implementation, reason
        self.checks: dict[str, dict] = {}

    def _set(self, nodeid: str, outcome: str, reason: str) -> None:
        self.checks[check_name(nodeid, self.implementation)] = {"outcome": outcome, "reason": reason}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        for item in items:
            skip = item.get_closest_marker("skip")
            self._set(item.nodeid, *(("not applicable", skip.kwargs["reason"]) if skip else ("not run", self.reason)))


class Recorder(Collector):
    """A pytest plugin: each check's outcome and reason, in the order collected; a check never reached (the run
    stopped: a timeout, an interrupt, -x) stays "not run" and says so."""

    def __init__(self, implementation: str):
        super().__init__(implementation, "not reached: the run stopped before this check (timeout or interrupt)")

    def pytest_runtest_logreport(self, report):
        if report.skipped and report.when in ("setup", "call"):
            self._set(report.nodeid, "not applicable", _skip_reason(report))
        elif report.failed:  # a failing setup (the server), call or teardown fails the check
            self._set(report.nodeid, "fail", f"{report.when}: {_failure(report)}")
        elif report.when == "call":
            notes = "; ".join(value for name, value in report.user_properties if name == "note")
            self._set(report.nodeid, "pass", notes)


def document(name: str, url: str | None, checks: dict[str, dict], ran: bool, command: list[str],
             reason: str | None = None) -> dict:
    implementation = implementations.IMPLEMENTATIONS[name]
    counts = {o: sum(c["outcome"] == o for c in checks.values()) for o in OUTCOMES}
    return {"implementation": name, "description": implementation.description, "server_url": url, "ran": ran,
            "reason": reason, "date": datetime.date.today().isoformat(), "command": command, "summary": counts,
            "checks": [{"check": k, **v} for k, v in checks.items()]}


def write(doc: dict, out_dir: Path = RESULTS_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{doc['implementation']}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def nothing_answers(url: str, timeout: float = 10.0) -> str | None:
    """Why no server answers GET URL/v1/models (a connection refused, a timeout), or None when one answers."""
    import httpx

    try:
        httpx.get(f"{url.rstrip('/')}/v1/models", timeout=timeout, trust_env=False)
    except httpx.TransportError as error:
        return f"{type(error).__name__}: {error}"
    return None


def run(name: str, url: str, pytest_args: list[str], out_dir: Path = RESULTS_DIR) -> tuple[int, Path]:
    """Refuses (SystemExit naming the URL and the implementation, nothing written) when no server answers at URL:
    every check would fail on the connection, and the implementation's recorded results would be replaced by that."""
    if (why := nothing_answers(url)) is not None:
        raise SystemExit(f"no server answers at {url} ({why}): start {name}'s server there first; "
                         f"{out_dir / (name + '.json')} is left as it was")
    recorder = Recorder(name)
    args = ["-p", "no:xdist", "-p", "no:cacheprovider", "-q", "-rs", CHECKS, "--implementation", name,
            "--server-url", url, *pytest_args]
    code = pytest.main(args, plugins=[recorder])
    if not recorder.checks:
        raise SystemExit(f"pytest ran no serving check (exit {code}): {' '.join(args)}")
    doc = document(name, url, recorder.checks, ran=True, command=["python", "-m", "pytest", *args])
    return code, write(doc, out_dir)


def not_run(name: str, reason: str, out_dir: Path = RESULTS_DIR) -> Path:
    collector = Collector(name, reason)
    url = "http://gpu-host.invalid:8000"  # collection opens no connection; a URL selects the adapter's checks
    args = ["-p", "no:xdist", "-p", "no:cacheprovider", "-q", "--collect-only", CHECKS, "--implementation", name,
            "--server-url", url]
    code = pytest.main(args, plugins=[collector])
    if code != 0 or not collector.checks:
        raise SystemExit(f"collecting the serving checks failed (exit {code}): {' '.join(args)}")
    return write(document(name, None, collector.checks, ran=False, command=[], reason=reason), out_dir)


SHORT = {"pass": "pass", "fail": "FAIL", "not applicable": "n/a", "not run": "not run"}


def table(docs: list[dict]) -> str:
    """Markdown: a summary line per implementation, then a row per check and a column per implementation;
    each cell the outcome and a reference to its reason, the reasons numbered below the table."""
    lines, reasons = [], {}
    for doc in docs:
        counts = ", ".join(f"{n} {o}" for o, n in doc["summary"].items() if n)
        how = f"run at {doc['server_url']}" if doc["ran"] else f"not run: {doc['reason']}"
        lines.append(f"- **{doc['implementation']}** ({doc['description']}), {doc['date']}: {counts}; {how}")

    def cell(result: dict | None) -> str:
        if result is None:
            return "not collected"
        if not result["reason"]:
            return SHORT[result["outcome"]]
        number = reasons.setdefault(result["reason"], len(reasons) + 1)
        return f"{SHORT[result['outcome']]} ({number})"

    lines += ["", "| check | " + " | ".join(d["implementation"] for d in docs) + " |",
              "|---|" + "---|" * len(docs)]
    results = [{c["check"]: c for c in d["checks"]} for d in docs]
    for name in dict.fromkeys(c for r in results for c in r):
        short = name.removeprefix(CHECKS + "/").replace("|", "\\|")
        lines.append(f"| `{short}` | " + " | ".join(cell(r.get(name)) for r in results) + " |")
    lines += ["", "Reasons:", ""] + [f"{n}. {reason}" for reason, n in reasons.items()] if reasons else []
    return "\n".join(lines) + "\n"


def load_all(out_dir: Path = RESULTS_DIR) -> list[dict]:
    order = list(implementations.IMPLEMENTATIONS)
    docs = [json.loads(p.read_text()) for p in sorted(out_dir.glob("*.json"))]
    return sorted(docs, key=lambda d: order.index(d["implementation"]))


def replace_table(text: str, rendered: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"no markers {BEGIN!r} ... {END!r} to put the table between")
    return pattern.sub(lambda _: f"{BEGIN}\n{rendered}{END}", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the serving checks against a server at a URL and write its JSON")
    r.add_argument("--implementation", required=True, choices=list(implementations.IMPLEMENTATIONS))
    r.add_argument("--server-url", required=True)
    r.add_argument("--out", type=Path, default=RESULTS_DIR,
                   help="the folder of the JSON (default golden/implementations)")
    r.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (e.g. -k)")
    n = sub.add_parser("not-run", help="write the JSON of an implementation not run here, with the reason")
    n.add_argument("--implementation", required=True, choices=list(implementations.IMPLEMENTATIONS))
    n.add_argument("--reason", required=True)
    t = sub.add_parser("table", help="print the markdown table of golden/implementations/*.json")
    t.add_argument("--write", type=Path, default=None, help="put it between the markers of this markdown file")
    args = parser.parse_args(argv)
    if args.command == "run":
        code, path = run(args.implementation, args.server_url, args.pytest_args, args.out)
        print(f"wrote {path}")
        return int(code)  # 1 where a check failed: the JSON says which
    if args.command == "not-run":
        print(f"wrote {not_run(args.implementation, args.reason)}")
        return 0
    rendered = table(load_all())
    if args.write:
        args.write.write_text(replace_table(args.write.read_text(), rendered))
        print(f"wrote the table into {args.write}")
    else:
        print(rendered, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
