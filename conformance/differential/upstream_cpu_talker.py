"""Upstream's talker in a vLLM engine on the CPU, on one dummy checkpoint: one process per checkpoint.

    python -m conformance.differential.upstream_cpu_talker --flavour greedy --out FILE [--batched] [--engine-checks]
        [PROMPT_ID ...]

Boots `vllm.LLM` on the tiny dummy checkpoint of that flavour with upstream's talker class
(conformance/differential/upstream_cpu_engine.py: vLLM's CPU worker with upstream's model-sampler
contract), runs the talker golden prompts one request at a time, greedy, `max_tokens` as the goldens
(conformance/cases/talker/prompts.yaml), and writes per prompt the rows (the 8 codes postprocess
handed back each step) and the LM tokens. With --batched the same engine then takes every prompt
in one `generate` (stream ids "batched/<prompt>"): four requests at a time, prefill chunked at 64
tokens beside other requests' decode steps, so upstream's per-request state (its state pool keyed
by request id) is exercised. With --engine-checks it runs instead the engine-level probes of
conformance/differential/engine_checks.py (seeded sampling, out-of-range sampling fields, long prompts, long
text prompts against our input limit, abort;
on the "sampling" flavour, as conformance/cases/talker/seeded.yaml) and writes what each did under
"engine_checks". The prompts are ours (reference.speech builds them in upstream's
layout, docs/upstream.md); a voice clone's delayed reference rows go with the request.

Engine settings: the base engine of conformance/cases/talker/engine_runs.yaml (max_model_len 1024,
4 sequences, 64 batched tokens), float32 (the goldens' dtype), eager (upstream's deploy files set
enforce_eager), prefix caching off (upstream's server keys a voice clone's cache by a salt its
speech adapter adds, tts_adapters/higgs_audio_v3.py:93, which is not run here), and the in-process
engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0) so the worker is this process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # two shared cores: no pinning (conftest.py)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def prompt_request(api, prompt: dict, max_tokens: int):
    """Our talker prompt for a golden prompt, and the request's extra_args carrying its reference."""
    from conformance.differential.upstream_cpu_engine import REFERENCE_KEY
    from conformance.talker import talker_cases

    talker_prompt = api.prompt(talker_cases.speech_request(prompt, max_tokens))
    extra = None
    if talker_prompt.ref_rows:
        extra = {REFERENCE_KEY: {"rows": [list(r) for r in talker_prompt.ref_rows], "start": talker_prompt.ref_start}}
    return talker_prompt, extra


BATCHED = "batched/"


def _request_rows(taken: dict[str, list], request_id: str) -> list:
    """The rows the worker kept for one output: vLLM names a request "<id>-<suffix>" inside the engine."""
    found = [rows for rid, rows in taken.items() if rid == request_id or rid.rsplit("-", 1)[0] == request_id]
    if len(found) != 1:
        raise RuntimeError(f"request {request_id}: {len(found)} code streams match among {sorted(taken)}")
    return found[0]


def _stream(output, rows: list) -> dict:
    completion = output.outputs[0]
    return {"rows": rows, "lm_tokens": list(completion.token_ids), "finish_reason": completion.finish_reason}


def _rows_of(llm, output) -> list:
    """The rows kept for `output` (none when upstream handed back no codes), emptying the worker's store."""
    (taken,) = llm.collective_rpc("upstream_take_rows")
    found = [rows for rid, rows in taken.items() if output.request_id in (rid, rid.rsplit("-", 1)[0])]
    return found[0] if found else []


def _probe(llm, prompt: dict, overrides: dict) -> dict:
    """One request with `overrides` on a sampling base: where it is refused, or how it completed."""
    from vllm import SamplingParams

    base = {"temperature": 1.0, "top_k": -1, "top_p": 1.0, "max_tokens": 16, "detokenize": False}
    try:
        params = SamplingParams(**{**base, **overrides})
    except Exception as exc:  # noqa: BLE001 -- the refusal is the outcome
        return {"outcome": "refused", "where": "SamplingParams", "error": f"{type(exc).__name__}: {exc}"}
    try:
        (output,) = llm.generate(prompt, params, use_tqdm=False)
    except Exception as exc:  # noqa: BLE001
        llm.collective_rpc("upstream_take_rows")
        return {"outcome": "refused", "where": "generate", "error": f"{type(exc).__name__}: {exc}"}
    return {"outcome": "completed", "rows": len(_rows_of(llm, output)), "tokens": len(output.outputs[0].token_ids),
            "finish_reason": output.outputs[0].finish_reason}


LONG_TEXT = "The quick brown fox jumps over the lazy dog. "


def long_text_prompt(api, tokens: int) -> tuple[str, dict]:
    """A text whose zero-shot prompt (reference.speech, upstream's layout) is `tokens` long, and that prompt:
    the longest prefix of LONG_TEXT repeated that fits, which must fit exactly."""
    from reference.speech import SpeechRequest

    source = LONG_TEXT * (tokens // len(LONG_TEXT.split()) + 1)  # `tokens` words or more: a token a word at least

    def prompt_of(chars: int) -> list[int]:
        return list(api.prompt(SpeechRequest(source[:chars])).token_ids)

    lo, hi = 1, len(source)
    while lo < hi:  # the longest prefix whose prompt has at most `tokens` tokens
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if len(prompt_of(mid)) <= tokens else (lo, mid - 1)
    ids = prompt_of(lo)
    if len(ids) != tokens:
        raise ValueError(f"no prefix of the long text makes a prompt of exactly {tokens} tokens (got {len(ids)})")
    return source[:lo], {"prompt_token_ids": ids}


def engine_checks(llm, api, requests: dict[str, tuple], max_model_len: int) -> dict:
    """The engine-level probes of conformance/differential/engine_checks.py on zero-shot prompts: seeded
    sampling (conformance/cases/talker/seeded.yaml's target and seeds), then the length probes, the long
    text prompts (greedy), the sampling probes, the abort, then the seeded request with a chunked prefill
    (on the CPU it stops the engine)."""
    from vllm import SamplingParams

    from conformance import case_files
    from conformance.differential import engine_checks as checks

    case = case_files.load("talker/seeded")
    target = case["target"]
    prompt = requests[target["prompt"]][1]
    others = [requests[pid][1] for pid in checks.SEEDED_OTHERS]

    def seeded(seed: int | None) -> SamplingParams:
        return SamplingParams(**{**target["sampling"], "seed": seed}, detokenize=False)

    runs = {}
    for name, seed in (("alone", target["sampling"]["seed"]), ("again", target["sampling"]["seed"]),
                       ("other_seed", case["other_seed"])):
        (output,) = llm.generate(prompt, seeded(seed), use_tqdm=False)
        runs[name] = _rows_of(llm, output)
    # Batched: the target and a seeded request prefill in the first step (their 62 tokens within the 64
    # batched tokens), beside an unseeded one whose prefill is chunked.
    outputs = llm.generate([others[0], prompt, others[1]], [seeded(11), seeded(target["sampling"]["seed"]),
                                                             seeded(None)], use_tqdm=False)
    (taken,) = llm.collective_rpc("upstream_take_rows")
    runs["batched"] = _request_rows(taken, outputs[1].request_id)
    probes = {}
    ids = prompt["prompt_token_ids"]
    for probe_id, (short_by, probe_max_tokens, _) in checks.LENGTH_PROBES.items():
        long_prompt = {"prompt_token_ids": [ids[i % len(ids)] for i in range(max_model_len - short_by)]}
        probes[probe_id] = _probe(llm, long_prompt, {"max_tokens": probe_max_tokens})
    long_input, greedy = {}, {"temperature": 0.0, "max_tokens": checks.LONG_INPUT_MAX_TOKENS}
    for probe_id in checks.LONG_INPUT_PROBES:
        _, text_prompt = long_text_prompt(api, checks.long_input_tokens(probe_id, max_model_len))
        long_input[probe_id] = {"prompt_tokens": len(text_prompt["prompt_token_ids"]),
                                **_probe(llm, text_prompt, greedy)}
    for probe_id, (_, overrides) in checks.SAMPLING_PROBES.items():
        probes[probe_id] = _probe(llm, prompt, overrides)
    abort = abort_run(llm, prompt, others[1], checks.ABORT_AFTER_STEPS)
    try:  # the target's prefill chunked behind two seeded requests: last, as on the CPU it stops the engine
        outputs = llm.generate([*others, prompt], [seeded(12), seeded(13), seeded(target["sampling"]["seed"])],
                               use_tqdm=False)
        (taken,) = llm.collective_rpc("upstream_take_rows")
        runs[checks.CHUNKED_SEEDED] = _request_rows(taken, outputs[-1].request_id)
    except Exception as exc:  # noqa: BLE001 -- the failure is the outcome
        runs[checks.CHUNKED_SEEDED] = {"error": f"{type(exc).__name__}: {exc}"}
    return {"seeded": runs, "probes": probes, "abort": abort,
            "long_input": {"max_model_len": max_model_len, "probes": long_input}}


def abort_run(llm, doomed: dict, kept: dict, after_steps: int) -> dict:
    """Two greedy requests in one batch, the first aborted (LLMEngine.abort_request) after `after_steps`
    engine steps: the state pool before the abort, the step after and at the end, the kept request's
    rows and its rows alone (conformance/differential/engine_checks.py, ABORT)."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=160, detokenize=False)
    (alone,) = llm.generate(kept, params, use_tqdm=False)
    kept_alone = _rows_of(llm, alone)
    engine = llm.llm_engine
    engine.add_request("abort-doomed", doomed, params)
    engine.add_request("abort-kept", kept, params)
    steps, pool_before, pool_after_abort, finished = 0, None, None, {}
    while engine.has_unfinished_requests():
        finished.update({o.request_id: o.outputs[0].finish_reason for o in engine.step() if o.finished})
        steps += 1
        if steps == after_steps + 1:
            (pool_after_abort,) = llm.collective_rpc("upstream_state_pool")
        if steps == after_steps:
            (pool_before,) = llm.collective_rpc("upstream_state_pool")
            engine.abort_request(["abort-doomed"])
    (taken,) = llm.collective_rpc("upstream_take_rows")
    (pool_end,) = llm.collective_rpc("upstream_state_pool")
    kept_rows = [rows for rid, rows in taken.items() if rid.startswith("abort-kept")]
    doomed_rows = [rows for rid, rows in taken.items() if rid.startswith("abort-doomed")]
    return {"aborted_after_steps": after_steps if pool_before is not None else None,
            "doomed_finished_before": finished.get("abort-doomed") if pool_before is None else None,
            "pool_before_abort": pool_before, "pool_after_abort": pool_after_abort, "pool_end": pool_end,
            "kept_alone": kept_alone, "kept": kept_rows[0] if kept_rows else [],
            "kept_finish_reason": finished.get("abort-kept"), "doomed_rows": len(doomed_rows[0]) if doomed_rows else 0}


def run(flavour: str, prompt_ids: list[str], batched: bool = False, with_engine_checks: bool = False) -> dict:
    from vllm import LLM, SamplingParams

    from conformance.differential.upstream_cpu_engine import WORKER_CLS
    from conformance.talker import talker_cases
    from higgs_dummy.cache import cached_checkpoint
    from reference.speech import SpeechAPI

    doc = talker_cases.load_prompts()
    spec = doc["checkpoint"]
    checkpoint = cached_checkpoint(spec["size"], spec["seed"], flavour)
    by_id = {p["id"]: p for p in doc["prompts"]}
    api = SpeechAPI(engine=None, checkpoint=checkpoint, runner="v1")
    started = time.monotonic()
    llm = LLM(model=str(checkpoint), worker_cls=WORKER_CLS, dtype="float32", enforce_eager=True, seed=0,
              enable_prefix_caching=False, max_model_len=1024, max_num_seqs=4, max_num_batched_tokens=64)
    boot_s = time.monotonic() - started
    (model_class,) = llm.collective_rpc("upstream_model_class")
    requests = []
    for prompt_id in prompt_ids or list(by_id):
        talker_prompt, extra = prompt_request(api, by_id[prompt_id], doc["max_tokens"])
        params = SamplingParams(temperature=0.0, max_tokens=doc["max_tokens"], detokenize=False, extra_args=extra)
        requests.append((prompt_id, {"prompt_token_ids": list(talker_prompt.token_ids)}, params))
    streams = {}
    if with_engine_checks:
        checks = engine_checks(llm, api, {r[0]: r for r in requests}, 1024)
        return {"flavour": flavour, "checkpoint": checkpoint.name, "model_class": model_class,
                "boot_s": round(boot_s, 1), "run_s": round(time.monotonic() - started - boot_s, 1),
                "streams": streams, "engine_checks": checks}
    for prompt_id, prompt, params in requests:
        (output,) = llm.generate(prompt, params, use_tqdm=False)
        (taken,) = llm.collective_rpc("upstream_take_rows")
        streams[prompt_id] = _stream(output, _request_rows(taken, output.request_id))
    if batched:
        outputs = llm.generate([r[1] for r in requests], [r[2] for r in requests], use_tqdm=False)
        (taken,) = llm.collective_rpc("upstream_take_rows")
        for (prompt_id, _, _), output in zip(requests, outputs):
            streams[BATCHED + prompt_id] = _stream(output, _request_rows(taken, output.request_id))
    return {"flavour": flavour, "checkpoint": checkpoint.name, "model_class": model_class,
            "boot_s": round(boot_s, 1), "run_s": round(time.monotonic() - started - boot_s, 1), "streams": streams}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flavour", default="greedy")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batched", action="store_true", help="then every prompt again, in one generate call")
    parser.add_argument("prompts", nargs="*", help="prompt ids (default: every talker golden prompt)")
    parser.add_argument("--engine-checks", action="store_true",
                        help="the engine-level probes (differential/engine_checks.py) instead of the streams")
    args = parser.parse_args(argv)
    args.out.write_text(json.dumps(run(args.flavour, args.prompts, args.batched, args.engine_checks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
