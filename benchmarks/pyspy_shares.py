"""Where a server's threads spend their busy time, from a py-spy raw profile
(`py-spy record --subprocesses --format raw`): each function's inclusive share of one thread's
samples.

    python -m benchmarks.pyspy_shares PYSPY.txt[.gz] --thread loop --top 25

`--thread` picks whose samples count: `loop` (the server's event loop: its main thread, engine
processes left out), `engine` (vLLM's engine core process, every thread), `other` (the server's
other threads, the code2wav stage's decodes among them, and stacks py-spy could not unwind whole).
A sample is busy time as py-spy sees it: running Python, or inside a call it made (a device copy
waiting for the GPU counts); idle waits are not sampled. Shares compare between runs of one
sitting, where the rate and duration were the same.
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r":\d+\)")  # a frame's line number: functions are counted whole


def _frames(line: str) -> tuple[list[str], int]:
    stack, _, count = line.rstrip("\n").rpartition(" ")
    return stack.split(";"), int(count)


def _thread(frames: list[str]) -> str | None:
    """Which of the three a sample's stack belongs to (frames[0] is py-spy's process line)."""
    rest = frames[1:]
    if not rest:
        return None
    if any("EngineCore" in f or "run_engine_core" in f for f in rest[:12]):
        return "engine"
    if rest[0].startswith("_run_module_as_main"):
        return "loop"
    return "other"


def shares(lines, thread: str) -> tuple[int, Counter]:
    """(the thread's samples, samples by function, each counted once a stack)."""
    total, inclusive = 0, Counter()
    for line in lines:
        if not line.strip():
            continue
        frames, count = _frames(line)
        if _thread(frames) != thread:
            continue
        total += count
        for name in {_LINE.sub(")", f) for f in frames[1:] if not f.startswith("process ")}:  # not a subprocess' line
            inclusive[name] += count
    return total, inclusive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pyspy_shares", description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="py-spy's raw output (gzip accepted)")
    parser.add_argument("--thread", choices=["loop", "engine", "other"], default="loop")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", help="only functions whose name holds this text")
    args = parser.parse_args(argv)
    opener = gzip.open if args.profile.suffix == ".gz" else open
    with opener(args.profile, "rt", errors="replace") as f:
        total, inclusive = shares(f, args.thread)
    if not total:
        raise SystemExit(f"{args.profile}: no samples of the {args.thread} thread")
    print(f"{args.profile}: {total} samples of the {args.thread} thread")
    rows = [(n, name) for name, n in inclusive.most_common() if not args.match or args.match in name]
    for n, name in rows[: args.top]:
        print(f"{n:6d} {100 * n / total:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
