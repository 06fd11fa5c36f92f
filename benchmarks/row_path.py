"""The speech server's own work per talker row, with no engine and no GPU: how many rows a second
one event loop carries through a streamed request, the codec's decode left out.

    python -m benchmarks.row_path --streams 64 256 --rows 250 --rows-per-output 1 4 --out-dir DIR

Why: on one H200 the served throughput stops near 235 audio s/s (about 5,900 rows a second)
whatever the number of streams, while the talker and the codec would use a quarter of the GPU
(issue #52). Everything a row meets in the server after vLLM hands it over runs on the server's
one event loop: the code channel's decode (reference/talker/code_channel.py), rows to frames
(reference/speech.py), the talker's pace meter, the stage stream's checks and cutter, the stage's
batching (reference/codec/stage.py), the chunks out. Its cost per row bounds the rows a second a
server can serve, whatever the GPU.

How: `Speaker.stream` (reference/serve/audio.py), the server's own path, over
- an engine that hands out prebuilt outputs (vLLM's FlatLogprobs, as the talker's sampler fills
  them: `--rows-per-output` rows an output, vLLM's `stream_interval`) to every running request
  once a step, through one queue a request, as AsyncLLM's output handler does; vLLM's own work per
  output (the output processor, in the same process) is not in the figure;
- the real code2wav stage (the profile's geometry, codec batch, in-flight limit) with its decode
  replaced by silence of the chunk's length: the batching, the thread hop and the chunks'
  delivery stay.
`--streams` requests run at once, each `--rows` rows long (the delay pattern of random codes,
then the stop token); the figures are the event loop's CPU time over rows (`us_per_row`: its thread's
time, what bounds a server) and the wall time over rows (idle waits included), on this machine's
CPU: compare commits on one machine in one run, never across machines. Writes DIR/row_path.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from vllm.logprobs import FlatLogprobs

from reference.codebooks import NUM_CODEBOOKS
from reference.codec.delay_pattern import apply_delay
from reference.codec.stage import CodecStage
from reference.talker import code_channel


class SilentStage(CodecStage):
    """The code2wav stage with silence for its decode: everything around the decode runs."""

    def decode_windows(self, windows):
        hop = self.codec.hop_length
        return [torch.zeros(w.emit_frames * hop) for w in windows]


class StepEngine:
    """AsyncLLM as the speech API sees it: each step hands every running request its next output."""

    def __init__(self, outputs: dict[str, list]):
        self.outputs = outputs  # request id -> its outputs in order
        self.queues: dict[str, asyncio.Queue] = {}
        self.started = asyncio.Event()

    async def generate(self, prompt, params, request_id: str):
        queue = self.queues[request_id] = asyncio.Queue()
        if len(self.queues) == len(self.outputs):
            self.started.set()
        while True:
            output = await queue.get()
            yield output
            if output.outputs[0].finish_reason is not None:
                return

    async def abort(self, request_id):
        pass

    async def run(self) -> None:
        await self.started.wait()
        step = 0
        while any(step < len(outs) for outs in self.outputs.values()):
            for request_id, outs in self.outputs.items():
                if step < len(outs):
                    self.queues[request_id].put_nowait(outs[step])
            step += 1
            await asyncio.sleep(0)  # the output handler awaits the next engine outputs


def request_outputs(rows: torch.Tensor, audio_id: int, stop_id: int, rows_per_output: int) -> list:
    """A request's outputs as AsyncLLM delivers them in DELTA mode: rows [L, 8], then the stop step."""
    lm = torch.full((len(rows) + 1,), audio_id)
    lm[-1] = stop_id
    codes = torch.cat([rows, rows[-1:]])  # the stop step carries a row the speech API drops
    tensors = code_channel.encode(lm, codes)
    steps = list(zip(tensors.logprob_token_ids.tolist(), tensors.logprobs.tolist()))
    outputs = []
    for start in range(0, len(steps), rows_per_output):
        flat = FlatLogprobs()
        for ids, values in steps[start : start + rows_per_output]:
            flat.append_fast(ids, values, range(len(ids)), [None] * len(ids))
        last = start + rows_per_output >= len(steps)
        outputs.append(SimpleNamespace(outputs=[SimpleNamespace(logprobs=flat, finish_reason="stop" if last else None)]))
    return outputs


async def serve_once(speaker, engine: StepEngine) -> int:
    """Runs the engine's requests, streamed, to their end; the PCM samples delivered."""
    from reference.speech import SpeechRequest

    async def one(request_id: str) -> int:
        samples = 0
        async for chunk in speaker.stream(SpeechRequest(text="row path"), request_id, time.monotonic()):
            samples += len(chunk)
        return samples

    stepper = asyncio.create_task(engine.run())
    done = await asyncio.gather(*(one(r) for r in engine.outputs))
    await stepper
    return sum(done)


def _loop_factory():
    """The server's event loop: uvicorn's default ("auto") takes uvloop where it is installed."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def measure(checkpoint: Path, profile: str, streams: int, rows: int, rows_per_output: int, repeats: int) -> dict:
    from reference.codec.model import load_codec
    from reference.deploy.resolve import resolve_deployment
    from reference.serve.audio import Speaker
    from reference.serve.metrics import ServeMetrics
    from reference.speech import SpeechAPI

    deployment = resolve_deployment(profile, "cuda")  # its serving settings; nothing runs on CUDA
    codec = load_codec(checkpoint, device="cpu")
    base = CodecStage.from_deployment(deployment, codec)
    generator = torch.Generator().manual_seed(0)
    walls, loop_cpu = [], []
    for _ in range(repeats):
        stage = SilentStage(codec, base.max_batch_size, base.max_inflight_chunks, deployment.geometry, carried=False)
        api = SpeechAPI(None, checkpoint, runner="v1", stage=stage)
        frames = rows - (NUM_CODEBOOKS - 1)
        outputs = {
            f"r{i}": request_outputs(apply_delay(torch.randint(0, 1024, (NUM_CODEBOOKS, frames), generator=generator)),
                                     api.ids.audio, api.ids.stop_ids[0], rows_per_output)
            for i in range(streams)
        }
        api.engine = engine = StepEngine(outputs)
        speaker = Speaker(api, ServeMetrics())
        start, start_cpu = time.perf_counter(), time.thread_time()  # the loop runs in this thread
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            samples = runner.run(serve_once(speaker, engine))
        walls.append(time.perf_counter() - start)
        loop_cpu.append(time.thread_time() - start_cpu)
        if samples != streams * frames * codec.hop_length:
            raise RuntimeError(f"{samples} samples delivered, expected {streams * frames * codec.hop_length}")
    n = streams * rows
    return {"streams": streams, "rows": rows, "rows_per_output": rows_per_output, "wall_s": walls,
            "loop_cpu_s": loop_cpu, "us_per_row": 1e6 * statistics.median(loop_cpu) / n,
            "wall_us_per_row": 1e6 * statistics.median(walls) / n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.row_path", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="many_streams_v2", help="deploy profile: geometry, codec batch, in-flight limit")
    parser.add_argument("--streams", nargs="+", type=int, default=[64, 256])
    parser.add_argument("--rows", type=int, default=257, help="rows a request (257: 10 s of audio)")
    parser.add_argument("--rows-per-output", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args(argv)

    from higgs_dummy.cache import cached_checkpoint

    checkpoint = cached_checkpoint("tiny", 0, "no_eoc")
    results = []
    print(f"{'streams':>7} {'rows/output':>11} {'loop us/row':>11} {'wall us/row':>11}")
    for per_output in args.rows_per_output:
        for streams in args.streams:
            r = measure(checkpoint, args.profile, streams, args.rows, per_output, args.repeats)
            results.append(r)
            print(f"{streams:>7} {per_output:>11} {r['us_per_row']:>11.1f} {r['wall_us_per_row']:>11.1f}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = {"profile": args.profile, "cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
           "results": results}
    (args.out_dir / "row_path.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
