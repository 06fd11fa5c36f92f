"""The capacity figure: the most real-time streams a speech server holds at once within a target.

    python -m benchmarks.capacity --base-url http://127.0.0.1:8091 --max-tokens 257   # ours running: 10 s each
    python -m benchmarks.capacity --base-url URL --extra-body '{"max_new_tokens": 257}'  # a peer (upstream's field)
    python -m benchmarks.capacity --size 4b --profile high_throughput_v2   # ours, started here as served.py does
    python -m benchmarks.capacity --size tiny --platform cpu --max-tokens 50 --start 1 --max-streams 8 \
        --resolution 1                                                  # the code path on a CPU; no figure

The server's flags, the request and its record are benchmarks/served.py's (from our server 10 s of
audio, `--max-tokens` 257; a peer's length: `--extra-body`). A level of c streams keeps c requests in
flight at once: c clients each send requests back to back, their first sends at c seeded uniform
instants within `--ramp-s` (a Poisson process's arrivals given their count; default: the warm-up's
median time of one request alone), so that the arrivals stay spread instead of coming in rounds.
Counted: each client's first `--rounds` (2) requests sent once all c have started. A client done with
its own keeps sending, uncounted, until every counted request has ended, so each counted stream
lives its whole length beside c - 1 others; every request ends before the next level starts. A
client whose request failed waits 0.5 s before its next. (Closed, not open loop: c is then the
streams in flight by construction, where Poisson arrivals at r a second hold about r times a
request's time in flight, a number that moves with the server's speed; each level reports the
streams it measured in flight, mean and peak.)

`--listen`: each client is a listener instead, who asks for the next answer once the last one's audio
has played (its first audio, then its length and any stalls; a failed one at once, after the pause),
and the first sends spread over one answer's audio (the warm-up's). A level of c is then c listeners
each playing a stream: the server holds fewer than c requests whenever it makes audio faster than
real time, and a client never waits on the tail of an answer it has far ahead of its playback. The
load stays as spread as the first sends were, where back-to-back clients whose answers take longer
under load than the warm-up's bunch up and arrive in waves
(benchmarks/results/2026-12-07-h100-host-chunks-mps/NOTES.md).

A level passes when at least `--stall-free` (0.99) of its counted streams played through without a
stall (a failed request, an error status, a broken body or a timeout, did not) and their TTFA p99
(over the answered ones) is at most `--ttfa-p99-ms` (300); a level past `--level-timeout` fails.
The search: c = `--start` (16), doubling up to `--max-streams` (512) until a level fails, then
bisection between the largest pass and the smallest fail until they are `--resolution` (8) apart.
The figure is that largest pass: 0 when every level tried failed, "at least" when none failed. No
level starts that would end past `--budget-s` (3600) from the warm-up on (each level taken to last
as long as the longest so far): the figure is then the bracket so far, marked unfinished.

Each level also groups its answers' TTFA by the requests in flight as each was sent, and, from a server
that counts them on /metrics (ours: higgs_serve_ttfa_seconds, higgs_serve_first_decode_seconds), its own
mean TTFA over the level and the code2wav stage's part of it.

Writes OUT/capacity.json (settings, target, versions, host, date, the criteria, every level's
figures, the streams measured in flight, mean and peak over its counted streams' span, the TTFA by
load and the server's split, and its records without their chunks; the figure) and OUT/capacity.png (TTFA p99 and the share of streams
stalled or failed against streams); one line per level on stdout, then the figure. Exit status 0
when the search ran (whatever its figure), 1 when there was no server or the warm-up had no answer.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from benchmarks import served
from reference.serve.metrics import metric, parse_metrics

FAILED_PAUSE_S = 0.5  # so that a server refusing at once is not asked again at once
SERVER_TTFA, SERVER_FIRST_DECODE = "higgs_serve_ttfa_seconds", "higgs_serve_first_decode_seconds"


def played_out_s(record: dict) -> float:
    """When a request's audio has played, counted from its send: its first audio, its length and its stalls
    (a failed request's, at its end)."""
    if not record["ok"]:
        return record["total_s"]
    return record["ttfa_s"] + record["audio_s"] + sum(record["stalls_s"])


async def steady_loop(speech: served.Speech, streams: int, rounds: int, ramp_s: float, seed: int, extra: list,
                      counted: list, listen: bool = False) -> None:
    """`streams` clients from seeded instants within `ramp_s`, each sending its next request once its
    last one ended (`listen`: once its audio has played): the records of each client's first `rounds`
    requests sent once every client has started go to `counted`, the others (the ramp's, and those that
    keep the load up until the last counted one ends) to `extra`."""
    starts = np.random.default_rng([seed, streams]).uniform(0.0, ramp_s, streams)
    t0, started, left = time.perf_counter(), 0, streams * rounds
    all_counted = asyncio.Event()

    async def client(start: float) -> None:
        nonlocal started, left
        await asyncio.sleep(start)
        started += 1
        own = rounds
        while own or not all_counted.is_set():
            counts = own > 0 and started == streams
            record = await speech.measure(t0, counted if counts else extra)
            if counts:
                own, left = own - 1, left - 1
                if not left:
                    all_counted.set()
            if not record["ok"]:
                await asyncio.sleep(FAILED_PAUSE_S)
            elif listen:
                await asyncio.sleep(max(0.0, t0 + record["sent_s"] + played_out_s(record) - time.perf_counter()))

    async with asyncio.TaskGroup() as group:
        for start in starts.tolist():
            group.create_task(client(start))


def _spans(records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """Each request's send and end (s from the level's start)."""
    sent = np.array([r["sent_s"] for r in records])
    return sent, sent + np.array([r["total_s"] for r in records])


def _in_flight_at(sent: np.ndarray, ends: np.ndarray, instants: np.ndarray) -> np.ndarray:
    """How many of the requests (sent, ends) were in flight at each instant (one sent then included)."""
    return ((sent[None, :] <= instants[:, None]) & (ends[None, :] > instants[:, None])).sum(axis=1)


def in_flight(counted: list[dict], extra: list[dict]) -> dict:
    """Requests in flight over the counted ones' span (first send to last end): the mean over time
    and the peak."""
    if not counted:
        return {"mean": None, "peak": None}
    sent, ends = _spans(counted + extra)
    begin, end = min(r["sent_s"] for r in counted), max(r["sent_s"] + r["total_s"] for r in counted)
    overlap = np.clip(np.minimum(ends, end) - np.maximum(sent, begin), 0.0, None).sum()
    instants = np.concatenate([[begin], sent[(sent > begin) & (sent < end)]])  # the count rises only at a send
    counts = _in_flight_at(sent, ends, instants)
    return {"mean": float(overlap / (end - begin)) if end > begin else None, "peak": int(counts.max())}


def ttfa_by_in_flight(counted: list[dict], extra: list[dict], width: int = 10) -> list[dict]:
    """The counted answers' TTFA grouped by the requests in flight as each was sent (itself included; the
    uncounted ones too), `width` a group: where the first audio waits on the load, it grows group by group."""
    answered = [r for r in counted if r["ok"]]
    if not answered:
        return []
    loads = _in_flight_at(*_spans(counted + extra), np.array([r["sent_s"] for r in answered]))
    groups: dict[int, list[float]] = {}
    for r, load in zip(answered, loads.tolist()):
        groups.setdefault(load // width, []).append(1000 * r["ttfa_s"])
    return [{"in_flight": [g * width, (g + 1) * width - 1], "requests": len(ttfa),
             "ttfa_p50_ms": float(np.median(ttfa)), "ttfa_max_ms": max(ttfa)} for g, ttfa in sorted(groups.items())]


async def scrape(speech: served.Speech) -> dict[str, float]:
    """The server's /metrics, parsed; {} where it has none."""
    try:
        response = await speech.client.get(f"{speech.url}/metrics")
    except httpx.HTTPError:
        return {}
    return parse_metrics(response.text) if response.status_code == 200 else {}


def server_split(before: dict[str, float], after: dict[str, float]) -> dict | None:
    """What the server counted between two scrapes: its answers, their mean TTFA and of it the code2wav
    stage's mean part (the first window cut to its chunk ready), in ms; None where it counts no TTFA."""
    def mean_ms(name: str) -> tuple[int, float | None]:
        count = metric(after, f"{name}_count") - metric(before, f"{name}_count")
        total = metric(after, f"{name}_sum") - metric(before, f"{name}_sum")
        return int(count), (1000 * total / count if count > 0 else None)

    answers, ttfa = mean_ms(SERVER_TTFA)
    if ttfa is None:
        return None
    return {"answers": answers, "ttfa_mean_ms": ttfa, "first_decode_mean_ms": mean_ms(SERVER_FIRST_DECODE)[1]}


def played_through(records: list[dict]) -> float | None:
    """The share of streams answered in full without a stall (a failed one was not)."""
    return sum(r["ok"] and not r["stalls_s"] for r in records) / len(records) if records else None


def verdict(level: dict, stall_free: float, ttfa_p99_ms: float) -> list[str]:
    """Why a level misses the target; [] when it meets it."""
    if level["timed_out"]:
        return ["ran past --level-timeout"]
    if not level["requests"]:
        return ["no stream counted"]
    reasons = []
    if level["played_through"] < stall_free:
        reasons.append(f"{level['played_through']:.1%} played through without a stall, under {stall_free:.1%}")
    p99 = level["ttfa_ms"]["p99"]
    if p99 is None:
        reasons.append("no stream answered")
    elif p99 > ttfa_p99_ms:
        reasons.append(f"TTFA p99 {p99:.0f} ms, over {ttfa_p99_ms:g}")
    return reasons


def bracket(verdicts: dict[int, bool]) -> tuple[int, int | None]:
    """The largest passing level below the smallest failing one (0: none) and that failing one (None:
    none failed)."""
    failing = min((c for c, ok in verdicts.items() if not ok), default=None)
    passing = max((c for c, ok in verdicts.items() if ok and (failing is None or c < failing)), default=0)
    return passing, failing


def next_streams(verdicts: dict[int, bool], start: int, top: int, resolution: int) -> int | None:
    """The level to run next given the verdicts so far (streams: passed), None when the search is
    done: `start`, doubling up to `top` while every level passes, then bisection."""
    passing, failing = bracket(verdicts)
    if failing is None:
        return start if not verdicts else None if passing >= top else min(2 * passing, top)
    return (passing + failing) // 2 if failing - passing > resolution else None


async def search(measure, start: int, top: int, resolution: int, budget_s: float, clock=time.monotonic) -> dict:
    """Runs `measure(streams)` (a level with "passed") at the levels next_streams picks while the
    next one fits in `budget_s` (taken to last as long as the longest so far); the figure and the
    levels in the order they ran."""
    verdicts: dict[int, bool] = {}
    levels, began, longest, finished = [], clock(), 0.0, True
    while (streams := next_streams(verdicts, start, top, resolution)) is not None:
        if clock() - began + longest > budget_s:
            finished = False
            break
        level_began = clock()
        level = await measure(streams)
        longest = max(longest, clock() - level_began)
        verdicts[streams] = level["passed"]
        levels.append(level)
    passing, failing = bracket(verdicts)
    return {"streams": passing, "first_failing": failing, "at_least": failing is None, "finished": finished,
            "levels": levels}


async def run(args, url: str, model: str, results: dict) -> bool:
    """The warm-up and the search; False when the warm-up had no answer to time the ramp by."""
    began = time.monotonic()
    body = results["body"] = served.request_body(args, model)
    target_s = args.ttfa_p99_ms / 1000  # also the goodput figures' TTFA
    async with served.speech_to(args, url, body) as speech:
        ramp_s = args.ramp_s
        if args.warmup:
            warmup = await served.timed_level("closed", 1, args.warmup,
                                              functools.partial(served.closed_loop, speech, 1, args.warmup),
                                              args.level_timeout, target_s)
            results["warmup"] = {k: v for k, v in warmup.items() if k != "records"}
            print("warm-up " + served.describe(warmup), flush=True)
            if ramp_s is None:  # one cycle of a client alone: the answer's time, or its audio's for a listener
                alone = [r["audio_s" if args.listen else "total_s"] for r in warmup["records"] if r["ok"]]
                if not alone:
                    results["status"] = "the warm-up had no answer"
                    return False
                ramp_s = float(np.median(alone))
        results["criteria"]["ramp_s"] = ramp_s

        async def measure(streams: int) -> dict:
            extra: list[dict] = []
            before = await scrape(speech)
            level = await served.timed_level(
                "steady", streams, streams * args.rounds,
                functools.partial(steady_loop, speech, streams, args.rounds, ramp_s, args.seed, extra,
                                  listen=args.listen),
                args.level_timeout, target_s)
            level.update(in_flight=in_flight(level["records"], extra), played_through=played_through(level["records"]),
                         ttfa_by_in_flight=ttfa_by_in_flight(level["records"], extra),
                         server=server_split(before, await scrape(speech)),
                         uncounted={"requests": len(extra), "failed": sum(not r["ok"] for r in extra)})
            level["failing"] = verdict(level, args.stall_free, args.ttfa_p99_ms)
            level["passed"] = not level["failing"]
            level["records"] = [{**{k: v for k, v in r.items() if k not in ("chunks", "gaps_s")},
                                 "chunk_count": len(r["chunks"])} for r in level["records"]]
            results["levels"].append(level)
            print(describe(level), flush=True)
            return level

        figure = await search(measure, args.start, args.max_streams, args.resolution,
                              args.budget_s - (time.monotonic() - began))
    del figure["levels"]  # already in results["levels"]
    results["capacity"] = figure
    print(figure_line(figure, results["criteria"]), flush=True)
    return True


def describe(level: dict) -> str:
    """served.py's line of a level, then the streams in flight and the verdict; under it, the TTFA by load."""
    streams = level["in_flight"]
    share = "-" if level["played_through"] is None else f"{level['played_through']:.1%}"
    mean = "-" if streams["mean"] is None else f"{streams['mean']:.1f}"
    by_load = "; ".join(f"{g['in_flight'][0]}-{g['in_flight'][1]}: {g['ttfa_p50_ms']:.0f} ms ({g['requests']})"
                        for g in level["ttfa_by_in_flight"])
    server = level["server"]
    if server is not None:
        stage = server["first_decode_mean_ms"]
        by_load += (f"\n  the server's mean TTFA over {server['answers']} answers: {server['ttfa_mean_ms']:.0f} ms, of it "
                    + ("-" if stage is None else f"{stage:.0f} ms") + " in the code2wav stage (first window cut -> chunk)")
    return (served.describe(level) + f"; in flight {mean} (peak {streams['peak']}); played through {share}: "
            + ("PASS" if level["passed"] else "FAIL (" + "; ".join(level["failing"]) + ")")
            + f"\n  TTFA p50 by requests in flight at the send (answers): {by_load or '-'}")


def figure_line(figure: dict, criteria: dict) -> str:
    target = f"TTFA p99 <= {criteria['ttfa_p99_ms']:g} ms, >= {criteria['stall_free']:.1%} played through"
    bound = "no level failed" if figure["at_least"] else f"{figure['first_failing']} failed"
    return (f"capacity: {'at least ' if figure['at_least'] else ''}{figure['streams']} streams ({target}; {bound}"
            + ("" if figure["finished"] else "; unfinished: --budget-s reached") + ")")


def plot(results: dict, path: Path) -> bool:
    """TTFA p99 and the share stalled or failed against streams, each level marked pass or fail,
    the targets and the figure; False: no level ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted(results["levels"], key=lambda level: level["load"])
    if not levels:
        return False
    criteria, figure = results["criteria"], results.get("capacity")
    xs = [level["load"] for level in levels]
    p99 = [served._nan(level["ttfa_ms"]["p99"]) for level in levels]
    missed = [math.nan if level["played_through"] is None else 100 * (1 - level["played_through"]) for level in levels]
    fig, (ttfa, stalled) = plt.subplots(2, 1, figsize=(7, 7), sharex=True)
    for ax, ys, limit, label in ((ttfa, p99, criteria["ttfa_p99_ms"], "TTFA p99, ms"),
                                 (stalled, missed, 100 * (1 - criteria["stall_free"]), "streams stalled or failed, %")):
        ax.plot(xs, ys, color="gray", linewidth=1)
        for passed, marker, colour, name in ((True, "o", "tab:green", "passes"), (False, "x", "tab:red", "fails")):
            ax.scatter([x for x, level in zip(xs, levels) if level["passed"] == passed],
                       [y for y, level in zip(ys, levels) if level["passed"] == passed],
                       marker=marker, color=colour, label=name, zorder=3)
        ax.axhline(limit, color="gray", linestyle="--", label="target")
        if figure and figure["streams"]:
            ax.axvline(figure["streams"], color="tab:blue", linestyle=":", label="capacity")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if max(xs) >= 8 * min(xs):
        stalled.set_xscale("log", base=2)
    stalled.set_xticks(xs, [f"{x:g}" for x in xs])
    stalled.minorticks_off()
    stalled.set_xlabel("listeners (each playing its stream)" if criteria["clients"] == "listeners"
                       else "streams in flight at once")
    if np.nanmax(p99 + [0]) > 10 * criteria["ttfa_p99_ms"]:
        ttfa.set_yscale("log")
    title = figure_line(figure, criteria) if figure else results["status"]
    fig.suptitle(f"{title}\n{served.where(results['target'])}, {results['body']['response_format']}, "
                 f"{results['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.capacity", description=__doc__.splitlines()[0])
    served.add_server_arguments(p, "capacity")
    p.add_argument("--stall-free", type=float, default=0.99,
                   help="a level passes when at least this share of its streams played through without a stall")
    p.add_argument("--ttfa-p99-ms", type=float, default=300.0, help="and their TTFA p99 is at most this")
    p.add_argument("--start", type=int, default=16, help="the first level, in streams")
    p.add_argument("--max-streams", type=int, default=512, help="the last doubling step")
    p.add_argument("--resolution", type=int, default=8, help="the bisection stops this many streams apart")
    p.add_argument("--rounds", type=int, default=2, help="counted requests per stream")
    p.add_argument("--listen", action="store_true",
                   help="each stream a listener: its next request once the last one's audio has played")
    p.add_argument("--ramp-s", type=float, help="the first sends spread over this (default: the warm-up's median "
                                                "time, or with --listen its audio's length)")
    p.add_argument("--budget-s", type=float, default=3600.0, help="no level starts that would end past this")
    args = p.parse_args(argv)
    served.check_server_arguments(p, args)
    if not 1 <= args.start <= args.max_streams or args.resolution < 1 or args.rounds < 1:
        p.error("give 1 <= --start <= --max-streams, --resolution >= 1 and --rounds >= 1")
    if not 0 < args.stall_free <= 1:
        p.error("--stall-free is a share: more than 0, at most 1")
    if not args.warmup and args.ramp_s is None:
        p.error("without a warm-up, give --ramp-s")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = {**served.new_results("benchmarks.capacity", argv, args),
               "criteria": {"stall_free": args.stall_free, "ttfa_p99_ms": args.ttfa_p99_ms,
                            "clients": "listeners" if args.listen else "back to back"}, "capacity": None,
               "levels": []}
    return 0 if served.measure_and_write(args, results, run, "capacity", plot) else 1


if __name__ == "__main__":
    sys.exit(main())
