"""Talker and codec side by side on one GPU (issue #52 item 3): how much does the code2wav stage's
decode slow the talker's step, and does it overlap with it when it runs on a CUDA stream of its own
in the talker's process, or in a process of its own (with or without an MPS daemon)?

    python -m benchmarks.side_by_side --batches 64 256 --seconds 8 --out-dir DIR
    python -m benchmarks.side_by_side --modes processes --label mps --out-dir DIR   # under an MPS daemon

The talker is a stand-in for the engine's decode step, not the vLLM engine, so that the two can be
arranged every way: the checkpoint size's Qwen3 shape in bfloat16 (per layer its QKV, attention over a
KV cache of `--context` tokens, output and MLP matmuls), one CUDA graph a step, and a host copy of the
step's output that waits for it, as vLLM's sampler does. The codec is the real one: the dummy
checkpoint's decoder in float32 (`--tf32`: TF32 convolutions), the stage's carried CUDA graphs
(reference/codec/stage.py `warm`), steady chunks of `chunk_frames` new frames for B streams, copied to
the host as the stage does. It is fed as the talker feeds it: one batch of B chunks every
`chunk_frames` talker steps.

Modes, each for `--seconds`, per batch B (streams):
- `alone`: the talker stepping alone, then the codec decoding batch after batch alone;
- `serial`: one thread, one CUDA stream: after every `chunk_frames`-th step the codec's batch, which
  the next step waits for (the two taking turns, as kernels of two processes do without MPS);
- `streams`: one process, the codec in a thread of its own on a CUDA stream of its own;
- `processes`: the codec in this process, the talker in another (the server and its engine core).
Per mode: the talker's step (median, p90; and apart, the steps that overlapped a codec batch and the
others: taking turns, a step beside a batch waits for it), the end-to-end step (the mode's seconds over
its steps) and its ratio to the talker's step alone, the codec's batch (median), and the batches it
still owed at the end (more than one: it did not keep up). Every step and batch is timed on the host
around work it waits for, on one clock for both processes; a row keeps those in 0.4 s from the middle
of its run, which DIR/side_by_side.png draws, a lane for each (the timeline of issue #52 item 3).
`--talker-first` gives the talker's work precedence where the mode allows it: in `streams`, its steps run on
a CUDA stream of high priority (the GPU's block scheduler starts its kernels' blocks ahead of the codec's
waiting ones); in `processes`, the codec's process is an MPS client of below-normal priority
(CUDA_MPS_CLIENT_PRIORITY=1, the talker's 0), which only an MPS daemon reads.
Writes DIR/side_by_side.json and the PNG (`--label` names the run in the JSON and the file names).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue
import statistics
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.codec_speed import SteadyChunks
from higgs_dummy.checkpoint import checkpoint_config
from higgs_dummy.codec_weights import codec_config, codec_state_dict
from reference.codec.geometry import StreamGeometry
from reference.codec.model import Codec
from reference.codec.stage import CodecStage

MODES = ("alone", "serial", "streams", "processes")
TIMELINE_S = 0.4  # the window of each mode's run that its row keeps, and the plot draws
MPS_PRIORITY = "CUDA_MPS_CLIENT_PRIORITY"  # read by the CUDA driver as the process starts CUDA, under MPS only
MANY_STREAMS_GEOMETRY = (8, 25, 10, 10)  # reference/deploy/profiles/many_streams_v2.yaml (read without its schema's
# jsonschema, which a bare GPU host lacks; tests/test_benchmark_side_by_side.py checks they agree)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


class Talker:
    """A decode step of the checkpoint size's Qwen3 shape for `batch` requests, each with `context`
    tokens cached: weights and caches random, bfloat16 on CUDA (float32 on the CPU)."""

    def __init__(self, size: str, batch: int, context: int, device: torch.device) -> None:
        cfg = checkpoint_config(size)["text_config"]
        d, dh, inter = cfg["hidden_size"], cfg["head_dim"], cfg["intermediate_size"]
        self.heads, self.kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

        def weight(rows: int, cols: int) -> torch.Tensor:
            return torch.randn(rows, cols, device=device, dtype=dtype) / rows**0.5

        qkv = (self.heads + 2 * self.kv_heads) * dh
        self.layers = [(weight(d, qkv), weight(self.heads * dh, d), weight(d, 2 * inter), weight(inter, d))
                       for _ in range(cfg["num_hidden_layers"])]
        self.caches = [torch.randn(2, batch, self.kv_heads, context, dh, device=device, dtype=dtype)
                       for _ in self.layers]
        self.x = torch.randn(batch, d, device=device, dtype=dtype)
        self.device, self.dh = device, dh
        self.host = torch.empty(batch, pin_memory=device.type == "cuda")
        self.graph = None
        if device.type == "cuda":
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                self.y = self._forward()  # warm-up outside the capture
            torch.cuda.current_stream(device).wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.y = self._forward()

    def _forward(self) -> torch.Tensor:
        x, b = self.x, len(self.x)
        for (w_qkv, w_o, w_gate_up, w_down), cache in zip(self.layers, self.caches):
            q = (x @ w_qkv)[:, : self.heads * self.dh].view(b, self.heads, 1, self.dh)
            attn = F.scaled_dot_product_attention(q, cache[0], cache[1], enable_gqa=True)
            x = x + attn.reshape(b, -1) @ w_o
            gate, up = (x @ w_gate_up).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ w_down
        return x.float().sum(-1)

    def step(self) -> None:
        """One step, waited for: its output copied to the host (what vLLM's sampling step waits for)."""
        if self.graph is None:
            self.y = self._forward()
        else:
            self.graph.replay()
        self.host.copy_(self.y, non_blocking=True)
        _sync(self.device)


def codec_load(stage: CodecStage, batch: int) -> SteadyChunks:
    """B streams of steady carried chunks of random codes, from the stage's graphs where it captured them."""
    shape = (batch, stage.codec.cfg.num_codebooks, stage.geometry.chunk_frames)
    codes = torch.randint(0, 1024, shape, generator=torch.Generator().manual_seed(batch))
    return SteadyChunks(stage, codes, stage.carried_graphs)


Interval = tuple[float, float]  # (start, end) on time.perf_counter's clock, which every process here shares


def _timed(fn) -> Interval:
    start = time.perf_counter()
    fn()
    return start, time.perf_counter()


def _loop(fn, seconds: float, samples: list[Interval] | None = None, counter=None) -> list[Interval]:
    """fn called back to back for `seconds`: when each call ran, appended to `samples` as it ends (a codec
    paced on them reads them growing), and counted in a shared `counter` (another process's)."""
    samples = [] if samples is None else samples
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        samples.append(_timed(fn))
        if counter is not None:
            counter.value += 1
    return samples


def _paced_codec(codec: SteadyChunks, steps, stop) -> list[Interval]:
    """The codec's batches as the talker's steps make them due (one every chunk_frames steps)."""
    samples = []
    while not stop():
        if len(samples) < steps() // codec.chunk:
            samples.append(_timed(codec.next))
        else:
            time.sleep(0.0002)
    return samples


def serial(talker: Talker, codec: SteadyChunks, seconds: float) -> tuple[list[Interval], list[Interval]]:
    steps, batches, end = [], [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        steps.append(_timed(talker.step))
        if len(steps) % codec.chunk == 0:
            batches.append(_timed(codec.next))
    return steps, batches


def _on_stream(device: torch.device, priority: int = 0):
    """A new CUDA stream of `priority` (lower is sooner: -1 is high, 0 the default's) made current, on CUDA."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.Stream(device, priority=priority))


def streams(talker: Talker, codec: SteadyChunks, seconds: float,
            talker_first: bool = False) -> tuple[list[Interval], list[Interval]]:
    steps: list[Interval] = []
    batches: list[Interval] = []
    done = threading.Event()

    def decode() -> None:
        with _on_stream(talker.device):
            batches.extend(_paced_codec(codec, lambda: len(steps), done.is_set))

    worker = threading.Thread(target=decode)
    worker.start()
    try:
        with _on_stream(talker.device, -1) if talker_first else contextlib.nullcontext():
            _loop(talker.step, seconds, steps)  # step by step: the codec paces itself on len(steps)
    finally:
        done.set()
        worker.join()
    return steps, batches


def _talker_process(size: str, batch: int, context: int, device: str, seconds: float, counter, ready, go, out) -> None:
    os.environ.pop(MPS_PRIORITY, None)  # the codec's process may be below normal (--talker-first); this one is not
    talker = Talker(size, batch, context, torch.device(device))
    talker.step()
    ready.set()
    go.wait()
    out.put(_loop(talker.step, seconds, counter=counter))


def processes(args, batch: int, codec: SteadyChunks) -> tuple[list[Interval], list[Interval]]:
    ctx = multiprocessing.get_context("spawn")
    counter, ready, go, out = ctx.Value("q", 0, lock=False), ctx.Event(), ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_talker_process,
                        args=(args.size, batch, args.context, args.device, args.seconds, counter, ready, go, out))
    child.start()
    try:
        while not ready.wait(0.5):
            if not child.is_alive():
                raise RuntimeError(f"the talker's process ended before it was ready (exit {child.exitcode})")
        go.set()
        finished = threading.Event()
        steps: list[Interval] = []

        def collect() -> None:
            with contextlib.suppress(queue.Empty):
                steps.extend(out.get(timeout=args.seconds + 120))
            finished.set()

        waiter = threading.Thread(target=collect)
        waiter.start()
        batches = _paced_codec(codec, lambda: counter.value, lambda: finished.is_set() or not child.is_alive())
        waiter.join()
        if not steps:
            raise RuntimeError(f"the talker's process gave no steps (exit {child.exitcode})")
    finally:
        child.join(60)
        if child.is_alive():
            child.kill()
    return steps, batches


def _ms(intervals: list[Interval]) -> list[float]:
    return [1000 * (end - start) for start, end in intervals]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def steps_beside(steps: list[Interval], batches: list[Interval]) -> tuple[list[float], list[float]]:
    """The talker's steps (ms) that overlapped a codec batch, and the others: where the two take turns on the
    GPU, a step beside a batch waits for it; where they run side by side, it barely stretches."""
    beside, apart, i = [], [], 0
    for start, end in steps:  # both in time order
        while i < len(batches) and batches[i][1] <= start:
            i += 1
        (beside if i < len(batches) and batches[i][0] < end else apart).append(1000 * (end - start))
    return beside, apart


def timeline(steps: list[Interval], batches: list[Interval], window_s: float = TIMELINE_S) -> dict:
    """The intervals (ms) within `window_s` from the middle of the run on, from the window's start."""
    if not steps:
        return {"talker": [], "codec": []}
    begin = (steps[0][0] + steps[-1][1] - window_s) / 2

    def within(intervals):
        return [[round(1000 * (a - begin), 3), round(1000 * (b - begin), 3)] for a, b in intervals
                if b > begin and a < begin + window_s]
    return {"talker": within(steps), "codec": within(batches)}


def summary(mode: str, batch: int, seconds: float, steps: list[Interval], batches: list[Interval], chunk: int,
            alone_step_ms: float | None) -> dict:
    step_ms, beside, apart = _ms(steps), *steps_beside(steps, batches)
    e2e = 1000 * seconds / len(steps) if steps else None
    row = {"mode": mode, "batch": batch, "steps": len(steps), "codec_batches": len(batches),
           "talker_step_ms": _median(step_ms),
           "talker_step_p90_ms": statistics.quantiles(step_ms, n=10)[-1] if len(step_ms) > 1 else None,
           "step_beside_codec_ms": _median(beside), "step_apart_ms": _median(apart),
           "e2e_step_ms": e2e, "codec_batch_ms": _median(_ms(batches)),
           "codec_owed": len(steps) // chunk - len(batches) if mode != "alone" else None,
           "timeline_ms": timeline(steps, [] if mode == "alone" else batches)}
    row["e2e_over_alone"] = e2e / alone_step_ms if e2e and alone_step_ms else None
    return row


def plot(rows: list[dict], path: Path) -> None:
    """Per batch, a lane for the talker's steps and one for the codec's batches in each mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(len(batches), 1, figsize=(10, 1.2 + 1.1 * len(rows) / len(batches)), squeeze=False)
    for ax, batch in zip(axes[:, 0], batches):
        mine = [r for r in rows if r["batch"] == batch]
        ticks, labels = [], []
        for lane, row in enumerate(reversed(mine)):
            y = 3 * lane
            for offset, name, colour in ((1, "talker", "tab:blue"), (0, "codec", "tab:orange")):
                spans = [(a, b - a) for a, b in row["timeline_ms"][name]]
                ax.broken_barh(spans, (y + offset, 0.8), facecolor=colour, edgecolor="white", linewidth=0.3,
                               label=name if lane == 0 else None)
            ticks.append(y + 0.9)
            labels.append(row["mode"])
        ax.set_yticks(ticks, labels)
        ax.set_xlim(0, 1000 * TIMELINE_S)
        ax.set_title(f"{batch} streams", fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("ms (each mode's own window, from the middle of its run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def measure(args) -> list[dict]:
    device = torch.device(args.device)
    geometry = StreamGeometry(*args.geometry, growing_chunks=True)
    cfg = codec_config(args.size)
    codec = Codec.from_state_dict(cfg, codec_state_dict(cfg, 0)).to(device)
    codec.tf32 = args.tf32
    stage = CodecStage(codec, max(args.batches), 2, geometry)
    stage.warm()
    rows = []
    for batch in args.batches:
        codec = codec_load(stage, batch)
        codec.next()
        talker = Talker(args.size, batch, args.context, device) if set(args.modes) - {"processes"} else None
        alone = None
        try:
            for mode in args.modes:
                if mode == "alone":
                    steps = _loop(talker.step, args.seconds)
                    alone = statistics.median(_ms(steps))
                    rows.append(summary(mode, batch, args.seconds, steps, _loop(codec.next, args.seconds),
                                        codec.chunk, alone))
                else:
                    if mode == "processes":
                        steps, batches = processes(args, batch, codec)
                    elif mode == "streams":
                        steps, batches = streams(talker, codec, args.seconds, args.talker_first)
                    else:
                        steps, batches = serial(talker, codec, args.seconds)
                    rows.append(summary(mode, batch, args.seconds, steps, batches, codec.chunk, alone))
                print(describe(rows[-1]), flush=True)
        finally:
            codec.close()
            del talker
    return rows


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def describe(row: dict) -> str:
    ratio = "" if row["e2e_over_alone"] is None else f" ({row['e2e_over_alone']:.2f} x alone)"
    owed = "" if row["codec_owed"] is None else f", owed {row['codec_owed']}"
    return (f"B={row['batch']:<4} {row['mode']:<9} talker step {_fmt(row['talker_step_ms'])} ms "
            f"(p90 {_fmt(row['talker_step_p90_ms'])}; beside a codec batch {_fmt(row['step_beside_codec_ms'])}, "
            f"apart {_fmt(row['step_apart_ms'])}), end to end {_fmt(row['e2e_step_ms'])} ms{ratio}; "
            f"codec batch {_fmt(row['codec_batch_ms'])} ms x {row['codec_batches']}{owed}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.side_by_side", description=__doc__.splitlines()[0])
    p.add_argument("--batches", nargs="+", type=int, default=[64, 256], help="streams: the talker's batch and the codec's")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--seconds", type=float, default=8.0, help="each mode's run")
    p.add_argument("--size", default="4b", help="dummy checkpoint shape (talker and codec): tiny | 4b")
    p.add_argument("--context", type=int, default=300, help="tokens cached per request (prompt and rows so far)")
    p.add_argument("--geometry", nargs=4, type=int, default=list(MANY_STREAMS_GEOMETRY), metavar="N",
                   help="first chunk, chunk, left context, holdback frames (growing chunks): many_streams_v2's")
    p.add_argument("--device", help="cuda where there is one, else cpu")
    p.add_argument("--tf32", action="store_true", help="TF32 in the codec's convolutions (extra.codec_tf32)")
    p.add_argument("--talker-first", action="store_true",
                   help="the talker's steps before the codec's: a high-priority stream (streams), the codec's "
                        "process an MPS client below normal (processes, under an MPS daemon)")
    p.add_argument("--label", help="names the run (e.g. mps) in the results")
    p.add_argument("--out-dir", type=Path, required=True)
    args = p.parse_args(argv)
    if "alone" in args.modes and args.modes[0] != "alone":
        p.error("--modes: alone first (the other modes' ratios are to it)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.talker_first:
        os.environ[MPS_PRIORITY] = "1"  # before this process starts CUDA; its talker's process drops it
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows = measure(args)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    name = f"side_by_side-{args.label}" if args.label else "side_by_side"
    out = {"label": args.label, "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
           "torch": torch.__version__, "size": args.size, "context": args.context, "geometry": args.geometry,
           "tf32": args.tf32, "talker_first": args.talker_first, "seconds": args.seconds, "rows": rows}
    (args.out_dir / f"{name}.json").write_text(json.dumps(out, indent=1) + "\n")
    plot(rows, args.out_dir / f"{name}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
