"""Prefix caching across talker requests (cases: conformance/cases/talker/prefix_sharing.yaml).

A voice's prompt is prefilled once: a request with an earlier request's voice reads the full
blocks of the prompt prefix they share from vLLM's prefix cache (vLLM's own hit counter says so).
A block whose audio positions hold other codes is never read: another voice with equal token ids
reads nothing, and a preempted request re-prefilled beside an equal prompt gets its own generated
rows back. Every stream equals the same request run alone with a salt of its own on the same
engine (nothing shared), and a greedy request of prompts.yaml its oracle golden.
"""

import pytest

from conformance import case_files
from conformance.engines import prefix_cache_hits, preemptions, runner_params
from conformance.talker import talker_cases
from higgs_dummy.cache import cached_checkpoint
from reference.speech import SpeechAPI
from reference.talker.prompt_salt import voice_key

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine]

DOC = case_files.load("talker/prefix_sharing")
PROMPTS = talker_cases.load_prompts()
PROMPT_BY_ID = {p["id"]: p for p in PROMPTS["prompts"]}
GOLDENS = talker_cases.load_goldens()
SAMPLED = {"temperature": 1.0, "top_k": 50, "top_p": 0.95}


def _request(spec: dict):
    prompt = {**PROMPT_BY_ID[spec["prompt"]], **({"text": spec["text"]} if "text" in spec else {})}
    sampling = {**SAMPLED, "seed": spec["seed"]} if "seed" in spec else None
    return talker_cases.speech_request(prompt, PROMPTS["max_tokens"], sampling)


def _golden(spec: dict, flavour: str) -> dict | None:
    """The oracle's stream of a greedy, unaltered prompt of prompts.yaml on the greedy flavour."""
    if flavour != "greedy" or "text" in spec or "seed" in spec:
        return None
    return talker_cases.golden_stream(GOLDENS, spec["prompt"], flavour)


def _shared_prefix_tokens(api: SpeechAPI, earlier: list, later, block_size: int) -> int:
    """The tokens `later` can read: full blocks of its longest prefix shared with an earlier
    prompt of the same voice, short of its last token (vLLM always computes that one)."""
    prompt = api.prompt(later)
    key = voice_key(prompt.ref_start, prompt.ref_rows)
    longest = 0
    for request in earlier:
        other = api.prompt(request)
        if voice_key(other.ref_start, other.ref_rows) != key:
            continue
        common = next((i for i, (a, b) in enumerate(zip(prompt.token_ids, other.token_ids)) if a != b),
                      min(len(prompt.token_ids), len(other.token_ids)))
        longest = max(longest, common)
    return min(longest, len(prompt.token_ids) - 1) // block_size * block_size


@pytest.mark.cpu
@pytest.mark.parametrize("case", DOC["cases"], ids=lambda c: c["id"])
@pytest.mark.parametrize("variant", runner_params())
def test_prefix_sharing(case, variant, pool, record_property):
    engine = DOC["engines"][case["engine"]]
    checkpoint = cached_checkpoint(engine["checkpoint"]["size"], engine["checkpoint"]["seed"],
                                   engine["checkpoint"].get("flavour", "greedy"))
    flavour = engine["checkpoint"].get("flavour", "greedy")
    booted = pool.get(variant, {**engine["args"], "enforce_eager": True}, checkpoint=checkpoint)
    shared = SpeechAPI(booted.engine, checkpoint, variant)  # fresh salts: nothing of another case's
    unshared = SpeechAPI(booted.engine, checkpoint, variant, share_voice_prefix=False)
    preempted_before = preemptions(booted)

    specs, results, earlier, hits_seen = [], [], [], []
    for index, batch in enumerate(case["batches"]):
        requests = [_request(spec) for spec in batch]
        hits_before = prefix_cache_hits(booted)
        results += shared.generate(requests)
        hits = prefix_cache_hits(booted) - hits_before
        hits_seen.append(hits)
        if index == len(case["batches"]) - 1 and "hits" in case:
            if case["hits"] == "none":
                assert hits == 0, f"{case['id']}: {hits} prompt tokens read from the cache, expected none"
            else:
                block = engine["args"]["block_size"]
                expected = sum(_shared_prefix_tokens(shared, earlier, r, block) for r in requests)
                assert expected >= block, f"{case['id']}: the prompts share no full block: the case tests nothing"
                assert hits == expected, f"{case['id']}: {hits} prompt tokens read from the cache, expected {expected}"
        specs += batch
        earlier += requests
    preempted = preemptions(booted) - preempted_before
    if case.get("expect_preemption"):
        assert preempted > 0, "the tiny KV cache forced no preemption: the case tests nothing"
    record_property("report", f"{variant} {case['id']}: prompt tokens read from the cache per batch {hits_seen}, "
                              f"{preempted} preemptions")

    for spec, result in zip(specs, results):
        alone = unshared.generate([_request(spec)])[0]
        assert result.rows == alone.rows, f"{case['id']}: {spec} streams other codes than unshared"
        assert result.lm_tokens == alone.lm_tokens and result.finish_reason == alone.finish_reason, spec
        golden = _golden(spec, flavour)
        if golden is not None:
            assert result.rows == golden["rows"], f"{case['id']}: {spec} left its oracle golden"
