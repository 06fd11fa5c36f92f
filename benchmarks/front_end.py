"""vLLM's own front end per talker row, in the server's process: what the code channel's logprobs cost there.

    python -m benchmarks.front_end --streams 64 256 --steps 100 --out-dir DIR

Why: served on an H100 at 64-128 streams, py-spy put vLLM's front end at 37-40 % of the server's event loop
(benchmarks/results/2026-12-07-h100-row-path/NOTES.md): per engine step, one msgpack message from the engine core,
decoded, then vLLM's OutputProcessor turning each request's part into a RequestOutput. The talker's 8 codes travel
in that message as flat logprobs (reference/talker/code_channel.py), the only per-step field stock vLLM carries to
the caller. How much of the front end is theirs decides whether a channel of our own for the codes is worth
building.

How: `--streams` requests registered with vLLM's OutputProcessor as the speech API makes them (DELTA outputs),
their steps encoded beforehand as the engine core sends them (vLLM's MsgpackEncoder: one EngineCoreOutputs a
step, every request's EngineCoreOutput in it), then on this thread, per step: the decode (MsgpackDecoder), the
OutputProcessor, and each request's RequestOutputCollector emptied, as AsyncLLM's output handler and `generate`
do. Two ways, per streams level: `codes` (the talker's row as 9 flat logprobs, as it is) and `token_only` (the same
steps with no logprobs: what a channel of our own would leave to vLLM). Figures: this thread's CPU time a row,
per part (`decode_us`, `process_us`, `collect_us`, `total_us`, medians of `--repeats`), on this machine's CPU:
compare the two ways, and commits, in one run on one machine. Writes DIR/front_end.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, EngineCoreRequest
from vllm.v1.engine.output_processor import OutputProcessor, RequestOutputCollector
from vllm.v1.outputs import LogprobsLists
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

from reference.codebooks import CODEBOOK_VOCAB, NUM_CODEBOOKS
from reference.talker import code_channel

WAYS = ("codes", "token_only")
AUDIO_TOKEN = 5  # the token id every talker step samples; its value does not matter to the front end


def engine_request(request_id: str, params: SamplingParams) -> EngineCoreRequest:
    """The request as AsyncLLM hands it to its output processor; fields by name, the ones this vLLM has."""
    fields = {"request_id": request_id, "external_req_id": request_id, "prompt_token_ids": [1, 2, 3],
              "mm_features": None, "sampling_params": params, "pooling_params": None, "arrival_time": time.time(),
              "lora_request": None, "cache_salt": None, "data_parallel_rank": None}
    return EngineCoreRequest(**{k: v for k, v in fields.items() if k in EngineCoreRequest.__struct_fields__})


def step_messages(request_ids: list[str], steps: int, codes: bool, seed: int = 0) -> list:
    """Every step's message from the engine core, encoded: each request's row (its LM token and, with `codes`, the
    9 flat logprobs the talker's sampler fills)."""
    encoder, rng = MsgpackEncoder(), np.random.default_rng(seed)
    offsets = code_channel.CODE_ID_OFFSET + np.arange(NUM_CODEBOOKS) * CODEBOOK_VOCAB
    messages = []
    for _ in range(steps):
        outputs = []
        for request_id in request_ids:
            logprobs = None
            if codes:
                ids = np.concatenate([[AUDIO_TOKEN], rng.integers(0, 1024, NUM_CODEBOOKS) + offsets])[None].astype(np.int32)
                logprobs = LogprobsLists(ids, np.zeros(ids.shape, np.float32), np.zeros(1, np.int32))
            outputs.append(EngineCoreOutput(request_id, [AUDIO_TOKEN], new_logprobs=logprobs))
        messages.append(encoder.encode(EngineCoreOutputs(outputs=outputs)))
    return messages


def measure(streams: int, steps: int, way: str, repeats: int) -> dict:
    parts = {"decode_us": [], "process_us": [], "collect_us": []}
    for repeat in range(repeats):
        processor, decoder = OutputProcessor(None, log_stats=False), MsgpackDecoder(EngineCoreOutputs)
        collectors = {}
        for i in range(streams):
            request_id = f"r{i}"
            params = code_channel.talker_sampling_params(stop_token_ids=[0], max_tokens=steps + 1, stream=True)
            if way == "token_only":
                params.logprobs = None
            collectors[request_id] = RequestOutputCollector(RequestOutputKind.DELTA, request_id)
            processor.add_request(engine_request(request_id, params), None, queue=collectors[request_id])
        messages = step_messages(list(collectors), steps, codes=way == "codes", seed=repeat)
        spent = dict.fromkeys(parts, 0.0)
        for frames in messages:
            start = time.thread_time()
            outputs = decoder.decode(frames)
            decoded = time.thread_time()
            processor.process_outputs(outputs.outputs)
            processed = time.thread_time()
            for collector in collectors.values():
                output = collector.get_nowait()
                if output is None:
                    raise RuntimeError("a request got no output for its step")
            if way == "codes" and frames is messages[0]:  # the speech API reads the row back (raises if it cannot)
                [(token, row)] = code_channel.decode(output.outputs[0].logprobs)
                assert token == AUDIO_TOKEN and len(row) == NUM_CODEBOOKS
            spent["decode_us"] += decoded - start
            spent["process_us"] += processed - decoded
            spent["collect_us"] += time.thread_time() - processed
        for key, seconds in spent.items():
            parts[key].append(1e6 * seconds / (streams * steps))
    figures = {key: statistics.median(values) for key, values in parts.items()}
    return {"streams": streams, "steps": steps, "way": way, **figures, "total_us": sum(figures.values()),
            "repeats": parts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.front_end", description=__doc__.splitlines()[0])
    parser.add_argument("--streams", nargs="+", type=int, default=[64, 256])
    parser.add_argument("--steps", type=int, default=100, help="engine steps a level (a row a request each)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args(argv)

    import vllm

    results = []
    print(f"{'streams':>7} {'way':>10} {'decode':>7} {'process':>7} {'collect':>7} {'total us/row':>12}")
    for streams in args.streams:
        for way in WAYS:
            r = measure(streams, args.steps, way, args.repeats)
            results.append(r)
            print(f"{streams:>7} {way:>10} {r['decode_us']:>7.1f} {r['process_us']:>7.1f} {r['collect_us']:>7.1f} "
                  f"{r['total_us']:>12.1f}")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = {"cpu": platform.processor() or platform.machine(), "vllm": vllm.__version__, "results": results}
    (args.out_dir / "front_end.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
