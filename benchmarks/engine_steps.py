"""Engine only: milliseconds per decode step, of the talker and of a bare Qwen3 of its shape.

A level is `c` requests submitted together, each running exactly n steps (the talker on the
no_eoc checkpoint, which never ends a stream early; the bare backbone with ignore_eos), timed by
the wall clock around the whole batch, with FINAL_ONLY outputs so that the front end does no work
per step. Each level runs at the short length first (warm-up: the first use of that batch size),
then at the short and at the long length; ms/step = (wall_long - wall_short) / (long - short), so
the prefill, the first step's scheduling and the output handling cancel out.

Samplings (plan.SAMPLINGS): greedy, and the profiles' default (temperature 1, top-k 50,
top-p 0.95), seeded per request on the talker, which draws its own noise from the seed
(reference/talker/step.py; vLLM makes no per-request generator). The bare backbone gets plain
SamplingParams with the same temperature, top-k and top-p and NO seed: stock vLLM's seeded
top-k/top-p over the full vocabulary is 7-15x slower at 16 requests (27.1 / 62.9 ms against
4.05 / 4.16 ms per step, V1 / V2, H200, ../shared/device/README.md), so a seeded backbone would
flatter the talker for a reason that has nothing to do with it.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import Callable

from vllm.inputs import TokensPrompt

from reference.deploy.sampling import validate_sampling_params
from reference.speech import SpeechAPI
from reference.talker import code_channel, prompts
from reference.talker.special_tokens import load_tokenizer, special_ids

from benchmarks import TEXT
from benchmarks.spread import spread

# (request index, steps, sampling values) -> (prompt, SamplingParams)
RequestMaker = Callable[[int, int, dict], tuple]


def talker_prompt(checkpoint) -> prompts.TalkerPrompt:
    """The zero-shot prompt of TEXT (the bare backbone is fed the same token ids)."""
    tokenizer = load_tokenizer(checkpoint)
    return prompts.zero_shot(tokenizer, special_ids(tokenizer), TEXT)


def talker_requests(api: SpeechAPI) -> RequestMaker:
    """Zero-shot talker requests of TEXT, made the way the speech API makes them."""
    prompt = talker_prompt(api.checkpoint)

    def make(index: int, steps: int, sampling: dict):
        seeded = {"seed": 1000 + index} if sampling.get("temperature") else {}
        values = validate_sampling_params({**sampling, **seeded, "max_tokens": steps}, api.runner)
        params = code_channel.talker_sampling_params(
            stop_token_ids=api.ids.stop_ids, ref_rows=prompt.ref_rows, ref_start=prompt.ref_start, **values)
        tokens = TokensPrompt(prompt_token_ids=list(prompt.token_ids), cache_salt=code_channel.unique_cache_salt())
        return tokens, params

    return make


async def _final(engine, prompt, params):
    final = None
    async for output in engine.generate(prompt, params, request_id=uuid.uuid4().hex):
        final = output
    return final


async def _batch(engine, make: RequestMaker, concurrency: int, steps: int, sampling: dict) -> float:
    """Wall seconds of `concurrency` requests of `steps` steps each, run together."""
    requests = [make(i, steps, sampling) for i in range(concurrency)]
    start = time.perf_counter()
    outputs = await asyncio.gather(*[_final(engine, prompt, params) for prompt, params in requests])
    wall = time.perf_counter() - start
    lengths = [len(o.outputs[0].token_ids) for o in outputs]
    if min(lengths) != steps or max(lengths) != steps:
        raise RuntimeError(f"asked for {steps} steps per request, got {sorted(set(lengths))}: "
                           "the timing needs exact lengths (a no_eoc checkpoint, ignore_eos)")
    return wall


async def ms_per_step(engine, make: RequestMaker, sampling_name: str, sampling: dict,
                      concurrency: int, steps: tuple[int, int], repeats: int = 1) -> dict:
    """ms per decode step from the wall time difference of SHORT and LONG steps, `repeats` times
    (after one warm-up): the median, the spread (spread.py) and each sample (the upgrade gate's
    tolerance is their spread)."""
    short, long = steps
    await _batch(engine, make, concurrency, short, sampling)  # warm-up
    samples, walls = [], []
    for _ in range(max(1, repeats)):
        wall_short = await _batch(engine, make, concurrency, short, sampling)
        wall_long = await _batch(engine, make, concurrency, long, sampling)
        samples.append(1000 * (wall_long - wall_short) / (long - short))
        walls.append([wall_short, wall_long])
    return {
        "sampling": sampling_name,
        "concurrency": concurrency,
        "ms_per_step": statistics.median(samples),
        "ms_per_step_samples": samples,
        "spread": {"ms_per_step": spread(samples)},
        "steps": [short, long],
        "wall_s": walls[0] if len(walls) == 1 else walls,
    }
