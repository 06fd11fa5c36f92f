"""Engine-level checks of upstream's talker in a vLLM engine (`tox -e upstream-cpu`): what it does with a request.

Four checks, each judged here from what the engine process recorded (upstream_cpu_talker.py --engine-checks):
- request_validation: a request with a sampling field out of our contract's range (reference/deploy/sampling.py)
  or a prompt at and past max_model_len. Ours refuses each out-of-range field naming it (a 400), and refuses
  a prompt past max_model_len; a prompt that fits with its max_tokens completes. A probe is recorded as
      {"outcome": "refused", "where": "SamplingParams" | "generate", "error": "..."}, or
      {"outcome": "completed", "rows": N, "finish_reason": "..."};
  a refusal naming the field is equal, an acceptance is the difference "accepts_<probe>" (where upstream
  takes it is pinned: conformance/cases/differential/pinned.yaml), a refusal without the field's name is
  "refused_unnamed".
- long_input: zero-shot text prompts at and past our input limit, greedy, LONG_INPUT_MAX_TOKENS rows asked for.
  Ours (the speech server, reference/serve/app.py Service.check_length) refuses a prompt whose tokens plus
  max_tokens do not fit max_model_len, with a 400 naming `input` (`ours_refuses`, held to the server's code by
  tests/test_differential_judging.py); a probe is recorded as a request_validation probe plus its
  "prompt_tokens" and the output's "tokens". Upstream completing where ours refuses is "accepts_past_our_limit"
  (pinned); an agreement is a refusal on both sides, or all the rows on both.
- seeded_sampling: one prompt sampled at temperature 1 with a seed: alone, again, in a batch beside
  requests with other seeds, in a batch whose seeded prefills are chunked (its codes equal each time),
  and with another seed (codes differ), as
  conformance/talker/test_seeded_sampling.py asserts of ours.
- abort: two greedy requests in one batch, the first aborted mid-generation (LLMEngine.abort_request):
  upstream's per-request state (its state pool, freed by on_requests_finished) no longer holds it the
  step after (a finished request's is freed at the next step too), and the other request's codes
  equal its codes alone.
Numpy-free and standard library only: the adapter's engine process and the main job both import it.
"""

from __future__ import annotations

from typing import Any

from conformance.differential.verdicts import Check

VALIDATION = "request_validation"
SEEDED = "seeded_sampling"
ABORT = "abort"
LONG_INPUT = "long_input"
ABORT_AFTER_STEPS = 8  # both prompts prefilled (82 tokens, 64 a step), a few codes decoded
INT64 = 2**63
TOP_K_VOCAB = 1026  # a codebook's codes
# the seeded request in a batch whose prefill is chunked: it and other seeded requests prefill over
# several steps beside each other
CHUNKED_SEEDED = "batched_chunked_prefill"
SEEDED_OTHERS = ("hello", "morning")  # zero-shot prompts of 15 and 35 tokens beside the target (fox, 47)

# probe id -> (field, the SamplingParams overrides); the base request samples (temperature 1, top_k -1,
# top_p 1, no seed) so the field reaches upstream's sampler. top_k 0 is not probed: ours takes it as
# "no top-k", as vLLM does.
SAMPLING_PROBES: dict[str, tuple[str, dict[str, Any]]] = {
    "temperature_negative": ("temperature", {"temperature": -0.5}),
    "temperature_huge": ("temperature", {"temperature": 1e9}),
    "top_k_negative": ("top_k", {"top_k": -5}),
    "top_k_above_vocab": ("top_k", {"top_k": TOP_K_VOCAB + 1}),
    "top_p_zero": ("top_p", {"top_p": 0.0}),
    "top_p_above_one": ("top_p", {"top_p": 1.5}),
    "max_tokens_beyond_model_len": ("max_tokens", {"max_tokens": 4096}),
    "seed_past_int64": ("seed", {"seed": INT64}),
}
# probe id -> (prompt tokens as max_model_len minus this, max_tokens, refusal expected)
LENGTH_PROBES: dict[str, tuple[int, int, bool]] = {
    "prompt_near_model_len": (8, 8, False),  # fits with its max_tokens: completes
    "prompt_at_model_len": (0, 8, True),  # no room for one token
    "prompt_past_model_len": (-16, 8, True),
}
LONG_INPUT_MAX_TOKENS = 24
# probe id -> prompt tokens past our limit, max_model_len - LONG_INPUT_MAX_TOKENS
LONG_INPUT_PROBES = {
    "text_fills_our_limit": 0,
    "text_one_past_our_limit": 1,
    "text_to_the_last_position": LONG_INPUT_MAX_TOKENS - 1,  # room for one token before max_model_len
    "text_at_model_len": LONG_INPUT_MAX_TOKENS,
}


def judge_probe(probe_id: str, outcome: dict[str, Any]) -> tuple[str | None, str]:
    """(difference or None, detail) of one recorded probe."""
    if probe_id in LENGTH_PROBES:
        refuse = LENGTH_PROBES[probe_id][2]
        field = "prompt"
    else:
        refuse, field = True, SAMPLING_PROBES[probe_id][0]
    if outcome["outcome"] == "refused":
        said = f"refused in {outcome['where']}: {outcome['error'][:300]}"
        if not refuse:
            return f"refuses_{probe_id}", said
        named = field in outcome["error"] or field == "prompt"
        return (None if named else "refused_unnamed"), said
    done = f"completed: {outcome['rows']} rows of codes, finish_reason {outcome['finish_reason']}"
    return (f"accepts_{probe_id}" if refuse else None), done


def validation_check(outcomes: dict[str, dict[str, Any]]) -> Check:
    check = Check(VALIDATION, "ours: each out-of-range sampling field refused naming it; a prompt past "
                              "max_model_len refused, one that fits completes")
    for probe_id in (*SAMPLING_PROBES, *LENGTH_PROBES):
        if probe_id not in outcomes:
            check.add(probe_id, "not_run", "no outcome recorded")
        else:
            check.add(probe_id, *judge_probe(probe_id, outcomes[probe_id]))
    return check


def long_input_tokens(probe_id: str, max_model_len: int) -> int:
    """The prompt length of a long-input probe."""
    return max_model_len - LONG_INPUT_MAX_TOKENS + LONG_INPUT_PROBES[probe_id]


def ours_refuses(prompt_tokens: int, max_tokens: int, max_model_len: int) -> bool:
    """Our speech server's input limit: the prompt plus max_tokens must fit max_model_len (else a 400 naming
    `input`), so a stream always runs to its end."""
    return prompt_tokens + max_tokens > max_model_len


def judge_long_input(outcome: dict[str, Any], max_model_len: int) -> tuple[str | None, str]:
    """(difference or None, detail) of one long-input probe against ours."""
    tokens, budget = outcome["prompt_tokens"], LONG_INPUT_MAX_TOKENS
    refuse = ours_refuses(tokens, budget, max_model_len)
    ours = (f"ours: a 400 naming input ({tokens} prompt tokens + max_tokens {budget} > max_model_len {max_model_len})"
            if refuse else f"ours: accepted ({tokens} + {budget} <= {max_model_len}), {budget} rows at most")
    if outcome["outcome"] == "refused":
        theirs = f"theirs: refused in {outcome['where']}: {outcome['error'][:200]}"
        return (None if refuse else "refuses_within_our_limit"), f"{ours}; {theirs}"
    rows, reason = outcome["rows"], outcome["finish_reason"]
    cut = reason == "length" and rows < budget
    theirs = (f"theirs: completed, {rows} rows, finish_reason {reason}"
              + (f", cut by max_model_len ({tokens} + {outcome['tokens']} output tokens)" if cut else ""))
    if refuse:
        return "accepts_past_our_limit", f"{ours}; {theirs}"
    return ("cut_within_our_limit" if cut else None), f"{ours}; {theirs}"


def long_input_check(run: dict[str, Any]) -> Check:
    """`run`: {"max_model_len": N, "probes": {probe id: outcome}} as upstream_cpu_talker recorded it."""
    check = Check(LONG_INPUT, f"ours: a prompt plus max_tokens {LONG_INPUT_MAX_TOKENS} past max_model_len refused "
                              "naming input; one that fits gets every row")
    for probe_id in LONG_INPUT_PROBES:
        outcome = run["probes"].get(probe_id)
        if outcome is None:
            check.add(probe_id, "not_run", "no outcome recorded")
        else:
            check.add(probe_id, *judge_long_input(outcome, run["max_model_len"]))
    return check


def seeded_check(runs: dict[str, Any]) -> Check:
    """`runs`: "alone", "again", "batched", CHUNKED_SEEDED (seed A) and "other_seed" (seed B): the rows of
    codes, or {"error": ...} where the engine failed."""
    check = Check(SEEDED, "exact: every row of 8 codes (temperature 1, float32)")
    alone = runs["alone"]
    for case in ("again", "batched", CHUNKED_SEEDED):
        if case not in runs:
            check.add(f"same_seed_{case}", "not_run", "no run recorded")
            continue
        if isinstance(runs[case], dict):
            check.add(f"same_seed_{case}", "engine_error", f"the engine failed: {runs[case]['error'][:300]}")
            continue
        same = runs[case] == alone
        check.add(f"same_seed_{case}", None if same else f"seed_{case}_differs",
                  f"{len(runs[case])} rows against {len(alone)} alone" + ("" if same else ", not equal"))
    differ = runs["other_seed"] != alone
    check.add("other_seed_differs", None if differ else "other_seed_same",
              f"{len(runs['other_seed'])} rows against {len(alone)}" + (", not equal" if differ else ", equal"))
    return check


def abort_check(run: dict[str, Any]) -> Check:
    """`run`: what upstream_cpu_talker.abort_run recorded."""
    check = Check(ABORT, "the aborted request's state freed the step after; the other request's rows exact")
    if run.get("aborted_after_steps") is None:
        check.add("aborted_mid_generation", "not_aborted", "the request finished before it could be aborted")
        return check

    def holds_doomed(pool: list[str] | None) -> bool:
        return pool is None or any(rid.startswith("abort-doomed") for rid in pool)

    before = f"aborted after {run['aborted_after_steps']} engine steps ({run['doomed_rows']} rows of codes); "
    check.add("aborted_state_freed", "state_kept_after_abort" if holds_doomed(run["pool_after_abort"]) else None,
              before + f"state pool before {run['pool_before_abort']}, the step after {run['pool_after_abort']}, "
                       f"at the end {run['pool_end']}")
    same = run["kept"] == run["kept_alone"]
    check.add("other_request_unchanged", None if same else "abort_changes_other_request",
              f"{len(run['kept'])} rows (finish_reason {run['kept_finish_reason']}) against {len(run['kept_alone'])} "
              "alone" + ("" if same else ", not equal"))
    return check
