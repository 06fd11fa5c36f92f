"""A bounded soak of the speech server: concurrent streams for a fixed time, some aborted.

    python -m conformance.tools.serving_soak --variant gpu_default_v2 [--seconds 60] [--concurrency 16]
        [--max-requests 4000] [--abort-every 8] [--url http://127.0.0.1:PORT]

Starts the server of a variant of conformance/cases/serving/server.yaml on loopback (or uses
--url, which must be a loopback address), measures each prompt of `concurrent_prompts` alone,
then runs `--concurrency` client threads that stream greedy requests back to back until
`--seconds` have passed or `--max-requests` were sent; every `--abort-every`-th request is closed
after its first audio chunk (those speak the long `abort` request of the case file, read by
SlowReader: its answer cannot end before the client leaves, so every one is an abort). It passes
when no request is lost (every completed stream equals its prompt alone, nothing answered other
than 200), the server counted every abort (higgs_serve_requests_aborted_total), and afterwards no
talker slot, KV block or engine request is left (polled for at most 60 s). Prints one JSON
summary; exit status 1 on any failure.

Every completed stream is also compared with its prompt alone by conformance/serving/stream_diff.py:
`mismatches` lists the first 20 beyond the bound, `farthest` is the completed stream farthest from
its prompt alone (lowest SNR) even when within the bound. Each gives both lengths in samples, the
first sample more than a few LSB apart (as a time and a codec row = sample // 960), the SNR over
the common length, before that row and from it, the largest difference in LSB, and the cause it
reads: "code flip" (a clean prefix, then unrelated audio: another greedy code), "rounding" (equal
length, small differences from the start: codec batch shapes), "length", "equal" or "other".
Not collected by pytest (the name does not start with `test_`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import httpx

from conformance import case_files
from conformance.talker import talker_cases
from conformance.serving.serving_client import ServerProcess, SlowReader, as_float, body_for, pcm_of_wav, wav_bytes
from conformance.serving.stream_diff import compare
from higgs_dummy.cache import cached_checkpoint
from reference.serve.metrics import metric, parse_metrics
from reference.codec.streaming import agreement
from reference.serve.wav import HEADER_BYTES

REQUEST_TIMEOUT_S = 120.0


class _Remote:
    """An already running server (--url): the parts of ServerProcess the soak uses."""

    def __init__(self, url: str):
        if urlparse(url).hostname not in ("127.0.0.1", "localhost", "::1"):
            raise SystemExit(f"--url must be a loopback address, got {url}")
        self.url, self.client = url, httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S)

    def metrics(self) -> dict[str, float]:
        return parse_metrics(self.client.get("/metrics").text)

    def stop(self) -> None:
        self.client.close()


def _stream(url: str, body: dict, abort: bool) -> tuple[int, bytes | None]:
    body = {**body, "stream_format": "audio"}
    if abort:  # the first chunk, then leave while the rest waits on this client
        with SlowReader(url, body, timeout=REQUEST_TIMEOUT_S) as reader:
            if reader.status == 200:
                reader.read_body(HEADER_BYTES + 1)
            return reader.status, None
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S) as client:
        with client.stream("POST", "/v1/audio/speech", json=body) as response:
            if response.status_code != 200:
                return response.status_code, None
            data = b"".join(response.iter_bytes())
    return 200, pcm_of_wav(data, streamed=True)


def same_audio(pcm: bytes, alone: bytes, bound: dict | None) -> bool:
    if bound is None:
        return pcm == alone
    if len(pcm) != len(alone):
        return False
    measured = agreement(as_float(pcm), as_float(alone))
    return measured.snr_db >= bound["min_snr_db"] and measured.max_abs_err <= bound["max_abs_err"]


def soak(server, args, bound: dict | None = None) -> dict:
    """`bound`: how far a completed stream may be from the same request alone (None: byte for byte)."""
    doc = case_files.load("serving/server")
    prompts = {p["id"]: p for p in talker_cases.load_prompts()["prompts"]}
    bodies = [body_for(prompts[pid]) for pid in doc["concurrent_prompts"]]
    alone = [_stream(server.url, b, abort=False)[1] for b in bodies]
    spec = doc["abort"]  # aborted requests are long ones, so that the engine still runs them at the disconnect
    long_body = body_for(prompts[spec["prompt"]], max_tokens=spec["max_tokens"])
    before = server.metrics()
    counter, lock = itertools.count(), threading.Lock()
    results = {"completed": 0, "aborted": 0, "lost": [], "mismatched": 0}
    mismatches, farthest = [], None  # stream_diff summaries, with the request and prompt
    deadline = time.monotonic() + args.seconds

    def worker():
        nonlocal farthest
        while time.monotonic() < deadline:
            with lock:
                n = next(counter)
            if n >= args.max_requests:
                return
            abort = args.abort_every > 0 and n % args.abort_every == args.abort_every - 1
            try:
                status, pcm = _stream(server.url, long_body if abort else bodies[n % len(bodies)], abort)
            except Exception as exc:  # a lost request: transport error, truncated stream, bad header
                with lock:
                    results["lost"].append(f"request {n}: {type(exc).__name__}: {exc}")
                continue
            with lock:
                if status != 200:
                    results["lost"].append(f"request {n}: HTTP {status}")
                elif abort:
                    results["aborted"] += 1
                else:
                    results["completed"] += 1
                    reference = alone[n % len(bodies)]
                    report = {"request": n, "prompt": doc["concurrent_prompts"][n % len(bodies)],
                              **compare(pcm, reference).summary()}
                    if farthest is None or _sort_key(report) < _sort_key(farthest):
                        farthest = report
                    if not same_audio(pcm, reference, bound):
                        results["mismatched"] += 1
                        mismatches.append(report)

    started = time.monotonic()
    with ThreadPoolExecutor(args.concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(args.concurrency)]:
            future.result()
    wall = time.monotonic() - started
    settle_deadline, after = time.monotonic() + 60.0, server.metrics()
    aborted_target = metric(before, "higgs_serve_requests_aborted_total") + results["aborted"]
    while time.monotonic() < settle_deadline:
        after = server.metrics()
        if (metric(after, "higgs_serve_talker_slots_in_use") == 0 and metric(after, "vllm:num_requests_running") == 0
                and metric(after, "vllm:num_requests_waiting") == 0 and metric(after, "vllm:kv_cache_usage_perc") == 0
                and metric(after, "higgs_serve_requests_aborted_total") >= aborted_target):
            break
        time.sleep(0.2)
    summary = {
        **results, "lost": results["lost"][:20], "lost_count": len(results["lost"]), "wall_s": round(wall, 1),
        "requests": min(next(counter), args.max_requests),
        "aborted_counted": metric(after, "higgs_serve_requests_aborted_total") - metric(before, "higgs_serve_requests_aborted_total"),
        "slots_in_use_after": metric(after, "higgs_serve_talker_slots_in_use"),
        "engine_running_after": metric(after, "vllm:num_requests_running"),
        "kv_cache_usage_after": metric(after, "vllm:kv_cache_usage_perc"),
        "answered_500": after.get('higgs_serve_requests_total{status="500"}', 0.0),
        "ttfa_mean_ms": round(1000 * _delta(before, after, "higgs_serve_ttfa_seconds_sum")
                              / max(1.0, _delta(before, after, "higgs_serve_ttfa_seconds_count")), 1),
        "mismatches": mismatches[:20], "farthest": farthest,
    }
    summary["ok"] = (not results["lost"] and not results["mismatched"] and summary["aborted_counted"] == results["aborted"]
                     and summary["slots_in_use_after"] == 0 and summary["engine_running_after"] == 0
                     and summary["kv_cache_usage_after"] == 0 and summary["answered_500"] == 0)
    return summary


def _sort_key(report: dict) -> tuple:
    """Farther first: another length, then the lower SNR (inf: equal), then the larger difference."""
    snr = float(report["snr_db"])  # 'inf' as a string in the JSON summary
    return (report["samples"] == report["samples_alone"], snr, -report["max_lsb"])


def _delta(before: dict, after: dict, name: str) -> float:
    return metric(after, name) - metric(before, name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="gpu_default_v2")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-requests", type=int, default=4000)
    parser.add_argument("--abort-every", type=int, default=8)
    parser.add_argument("--url", default=None, help="a running server on loopback (default: start one)")
    args = parser.parse_args(argv)
    if args.url:
        server = _Remote(args.url)
    else:
        doc = case_files.load("serving/server")
        variant = next(v for v in doc["variants"] if v["id"] == args.variant)
        gpu = doc["gpu_overrides"] if variant["platform"] == "cuda" else {}
        overrides = {**doc["overrides"], **gpu, **variant["overrides"]}
        work = Path(tempfile.mkdtemp(prefix="serving_soak_"))
        (work / "voices").mkdir()
        (work / "voices" / "narrator.wav").write_bytes(wav_bytes(talker_cases.reference_audio({"seconds": 0.5, "seed": 7})))
        server = ServerProcess(cached_checkpoint("tiny", 0), variant["profile"], variant["platform"], overrides, work,
                               work / "voices")
        server.wait_healthy()
    try:
        summary = soak(server, args, None if args.url else variant.get("concurrent_bound"))
    finally:
        server.stop()
    print(json.dumps(summary, indent=1))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
