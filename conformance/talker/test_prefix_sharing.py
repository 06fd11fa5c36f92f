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
from reference.talker.prompt_salt import PromptSalts

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine]

DOC = case_files.load("talker/prefix_sharing")
PROMPTS = talker_cases.load_prompts()
PROMPT_BY_ID = {p["id"]: p for p in PROMPTS["prompts"]}
GOLDENS = talker_cases.load_goldens()
SAMPLED = {"temperature": 1.0, "top_k": 50, "top_p": 0.95}


def _request(spec: dict):
    prompt = {**PROMPT_BY_ID[spec["prompt"]], **({"text": spec["text"]} if "text" in spec else {})}
    sampling = {**SAMPLED, "seed": spec["seed"]} if "seed" in spec else None
    return talker_cases.speech_request(prompt, spec.get("max_tokens", PROMPTS["max_tokens"]), sampling)


def _key(spec: dict) -> tuple:
    """One request of a batch, whatever its copy count."""
    return tuple(sorted((k, v) for k, v in spec.items() if k != "times"))


def _copies(batch: list[dict]) -> list[dict]:
    """The batch's requests: `times` copies of a spec, `{copy}` in a text numbering them from 1."""
    return [{**spec, "text": spec["text"].format(copy=n)} if "{copy}" in spec.get("text", "") else spec
            for spec in batch for n in range(1, spec.get("times", 1) + 1)]


def _golden(spec: dict, flavour: str) -> dict | None:
    """The oracle's stream of a greedy, unaltered prompt of prompts.yaml on the greedy flavour."""
    if flavour != "greedy" or set(spec) - {"prompt", "times"}:
        return None
    return talker_cases.golden_stream(GOLDENS, spec["prompt"], flavour)


class SaltedPrompts:
    """What the salt's contract (reference/talker/prompt_salt.py) lets each request read: the
    token ids it shares with an earlier request of the same salt (voice and repeat count). A
    second PromptSalts fed the same prompts in the order SpeechAPI submits them counts the
    repeats as the API's own does; its salts differ only in their instance key."""

    def __init__(self, api: SpeechAPI):
        self.api, self.salts, self.built, self.submitted = api, PromptSalts(), {}, []

    def _prompt(self, spec: dict):
        if _key(spec) not in self.built:
            self.built[_key(spec)] = self.api.prompt(_request(spec))
        return self.built[_key(spec)]

    def submit(self, batch: list[dict]) -> list[tuple[str, list[int]]]:
        """Each request of the batch as (salt, token ids), in submission order."""
        salted = [(self.salts.salt(p), p.token_ids) for p in map(self._prompt, batch)]
        self.submitted.append(salted)
        return salted

    def readable(self, block_size: int, with_own_batch: bool = False) -> int:
        """Prompt tokens the last batch submitted can read from the cache: per request, the full
        blocks of its longest prefix shared with an earlier request of its salt, short of its last
        token (vLLM always computes that one). Earlier means an earlier batch; `with_own_batch`
        adds the requests submitted before it in its own batch (whether those are computed first
        is the scheduler's choice)."""
        *before, batch = self.submitted
        total = 0
        for n, (salt, ids) in enumerate(batch):
            earlier = [r for b in before for r in b] + (batch[:n] if with_own_batch else [])
            longest = max((_common(ids, other) for other_salt, other in earlier if other_salt == salt), default=0)
            total += min(longest, len(ids) - 1) // block_size * block_size
        return total


def _common(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


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

    salted = SaltedPrompts(shared)
    specs, results, hits_seen = [], [], []
    for index, batch in enumerate(case["batches"]):
        batch = _copies(batch)
        salted.submit(batch)
        hits_before = prefix_cache_hits(booted)
        results += shared.generate([_request(spec) for spec in batch])
        hits = prefix_cache_hits(booted) - hits_before
        hits_seen.append(hits)
        if index == len(case["batches"]) - 1 and "hits" in case:
            if case["hits"] == "none":
                assert hits == 0, f"{case['id']}: {hits} prompt tokens read from the cache, expected none"
            else:
                block = engine["args"]["block_size"]
                expected = salted.readable(block)
                assert expected >= block, f"{case['id']}: the prompts share no full block: the case tests nothing"
                assert salted.readable(block, with_own_batch=True) == expected, \
                    f"{case['id']}: requests of the last batch share more with each other than with earlier " \
                    "batches, so the hits depend on the scheduler: make their prompts part sooner"
                assert hits == expected, f"{case['id']}: {hits} prompt tokens read from the cache, expected {expected}"
        specs += batch
    preempted = preemptions(booted) - preempted_before
    if case.get("expect_preemption"):
        assert preempted > 0, "the tiny KV cache forced no preemption: the case tests nothing"
    elif "hits" in case:
        assert preempted == 0, f"{case['id']}: {preempted} preemptions: their re-prefills count as hits too"
    record_property("report", f"{variant} {case['id']}: {len(specs)} requests, prompt tokens read from the cache "
                              f"per batch {hits_seen}, {preempted} preemptions")

    distinct = list({_key(spec): spec for spec in specs}.values())  # a request and its copies: run once
    alone = dict(zip(map(_key, distinct), unshared.generate([_request(spec) for spec in distinct])))
    for spec, result in zip(specs, results):
        expected = alone[_key(spec)]
        assert result.rows == expected.rows, f"{case['id']}: {spec} streams other codes than unshared"
        assert result.lm_tokens == expected.lm_tokens and result.finish_reason == expected.finish_reason, spec
        golden = _golden(spec, flavour)
        if golden is not None:
            assert result.rows == golden["rows"], f"{case['id']}: {spec} left its oracle golden"
    if case.get("distinct_seeds"):
        by_prompt = {}
        for key, result in alone.items():
            by_prompt.setdefault(tuple(kv for kv in key if kv[0] != "seed"), set()).add(str(result.rows))
        assert any(len(streams) > 1 for streams in by_prompt.values()), \
            f"{case['id']}: no two seeds of one prompt streamed different codes: another request's rows would pass"
