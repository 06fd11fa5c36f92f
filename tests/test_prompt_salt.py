"""The talker's prefix-cache salt: one voice shares, different codes never do, and no prompt
gets the same salt twice (reference/talker/prompt_salt.py)."""

import sys
import threading

import numpy as np
import pytest

from higgs_dummy.cache import cached_checkpoint
from reference.speech import SpeechAPI, SpeechRequest
from reference.talker.prompt_salt import COUNTER_SLOTS, ZERO_SHOT, PromptSalts, _prompt_slot, voice_key

pytestmark = pytest.mark.cpu


def _codes(seed: int, frames: int = 4) -> list[list[int]]:
    return np.random.default_rng(seed).integers(0, 1024, size=(8, frames)).tolist()


@pytest.fixture(scope="module")
def api():
    return SpeechAPI(engine=None, checkpoint=cached_checkpoint("tiny", 0), runner="v1")


def test_voice_key_is_the_same_for_the_same_rows_at_the_same_slots():
    rows = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16]]
    assert voice_key(3, rows) == voice_key(3, [list(r) for r in rows]) == voice_key(3, np.asarray(rows))
    assert voice_key(None, ()) == ZERO_SHOT


def test_voice_key_differs_when_one_code_or_the_start_slot_differs():
    rows = np.arange(16).reshape(2, 8)
    changed = rows.copy()
    changed[1, 7] += 1
    assert voice_key(3, rows) != voice_key(3, changed)
    assert voice_key(3, rows) != voice_key(4, rows)
    assert voice_key(3, rows) != voice_key(3, rows[:1])


def test_voice_key_refuses_rows_without_a_start():
    with pytest.raises(ValueError, match="start"):
        voice_key(None, [[1] * 8])


def test_one_voice_with_different_texts_gets_one_salt(api):
    salts = PromptSalts()
    first = salts.salt(api.prompt(SpeechRequest("Hello there.", ref_codes=_codes(1))))
    second = salts.salt(api.prompt(SpeechRequest("Something else.", ref_codes=_codes(1))))
    assert first == second
    assert first.startswith(voice_key(*_slots(api, _codes(1))))


def _slots(api, codes):
    prompt = api.prompt(SpeechRequest("x", ref_codes=codes))
    return prompt.ref_start, prompt.ref_rows


def test_voices_with_equal_token_ids_get_different_salts(api):
    salts = PromptSalts()
    a, b = (api.prompt(SpeechRequest("Same text.", ref_codes=_codes(seed))) for seed in (1, 2))
    assert a.token_ids == b.token_ids
    assert salts.salt(a) != salts.salt(b)


def test_the_same_prompt_never_gets_the_same_salt_twice(api):
    salts = PromptSalts()
    prompt = api.prompt(SpeechRequest("Same text.", ref_codes=_codes(1)))
    given = [salts.salt(prompt) for _ in range(5)]
    assert len(set(given)) == 5
    zero_shot = api.prompt(SpeechRequest("Same text."))
    assert len({salts.salt(zero_shot) for _ in range(3)}) == 3


def test_one_prompt_repeated_past_a_16_bit_counter_never_gets_a_salt_twice(api):
    # More repeats than 16 bits count (COUNTER_SLOTS is 1 << 16): a counter that wrapped, or one
    # kept modulo the slots, would hand an early salt out again.
    salts = PromptSalts()
    prompt = api.prompt(SpeechRequest("Same text.", ref_codes=_codes(1)))
    repeats = COUNTER_SLOTS + 2
    assert len({salts.salt(prompt) for _ in range(repeats)}) == repeats


def _two_prompts_of_one_slot(api):
    """Two zero-shot prompts that share one repeat counter (found by search: of 65,536 slots, the
    first shared one comes after about 300 prompts)."""
    seen = {}
    for i in range(20 * int(COUNTER_SLOTS**0.5)):
        prompt = api.prompt(SpeechRequest(f"Text {i}."))
        slot = _prompt_slot(ZERO_SHOT, prompt.token_ids)
        if slot in seen:
            return seen[slot], prompt
        seen[slot] = prompt
    raise AssertionError("no two prompts share a counter slot")  # pragma: no cover


def test_two_prompts_sharing_a_counter_never_get_a_salt_twice(api):
    # Taking turns on one counter past 16 bits: neither prompt sees a salt of its own again.
    first, second = _two_prompts_of_one_slot(api)
    assert first.token_ids != second.token_ids
    salts = PromptSalts()
    given = {first: [], second: []}
    for _ in range(COUNTER_SLOTS // 2 + 1):
        for prompt in (first, second):
            given[prompt].append(salts.salt(prompt))
    for prompt, handed in given.items():
        assert len(set(handed)) == len(handed)


def test_threads_salting_one_prompt_never_get_a_salt_twice(api):
    # A thread switch every microsecond, so an unguarded read-then-increment interleaves.
    interval = sys.getswitchinterval()
    salts = PromptSalts()
    prompt = api.prompt(SpeechRequest("Same text.", ref_codes=_codes(1)))
    threads, per_thread = 8, 2000
    handed: list[list[str]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def run(out: list[str]) -> None:
        start.wait()
        out.extend(salts.salt(prompt) for _ in range(per_thread))

    workers = [threading.Thread(target=run, args=(out,)) for out in handed]
    sys.setswitchinterval(1e-6)
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(interval)
    every = [salt for out in handed for salt in out]
    assert len(every) == threads * per_thread and len(set(every)) == len(every)


def test_two_salt_sources_never_meet(api):
    prompt = api.prompt(SpeechRequest("Same text.", ref_codes=_codes(1)))
    assert PromptSalts().salt(prompt) != PromptSalts().salt(prompt)


def test_speech_api_salts_by_voice_unless_told_not_to(api):
    request = SpeechRequest("Hi.", ref_codes=_codes(1), sampling={"max_tokens": 4})
    tokens, _ = api._inputs(request, stream=False)
    assert tokens["cache_salt"].startswith(voice_key(*_slots(api, _codes(1))))
    unshared = SpeechAPI(engine=None, checkpoint=api.checkpoint, runner="v1", share_voice_prefix=False)
    assert voice_key(*_slots(api, _codes(1))) not in unshared._inputs(request, stream=False)[0]["cache_salt"]


@pytest.mark.parametrize("field", ["text", "ref_text"])
def test_a_text_holding_the_audio_token_is_refused(api, field):
    texts = {"text": "Hi.", "ref_text": "Ref.", field: "Hi <|audio|> there."}
    with pytest.raises(ValueError, match=rf"{field} holds the special token <\|audio\|>"):
        api.prompt(SpeechRequest(texts["text"], ref_codes=_codes(1), ref_text=texts["ref_text"]))
