"""The in-band code channel: 8 codes per step through vLLM's logprobs containers."""

import pytest
import torch
from vllm.logprobs import FlatLogprobs

from reference.talker import code_channel

pytestmark = pytest.mark.cpu


def _flat(lm_tokens, codes) -> FlatLogprobs:
    tensors = code_channel.encode(torch.tensor(lm_tokens), torch.tensor(codes))
    flat = FlatLogprobs()
    for ids, values in zip(tensors.logprob_token_ids.tolist(), tensors.logprobs.tolist()):
        flat.append_fast(ids, values, range(len(ids)), [None] * len(ids))
    return flat


def test_codes_round_trip_in_order_with_repeated_codes():
    codes = [[5, 5, 5, 5, 1024, 1024, 1024, 1024], [1025, 7, 7, 0, 1023, 1023, 3, 3]]
    assert code_channel.decode(_flat([9, 9], codes)) == [(9, codes[0]), (9, codes[1])]


def test_codes_survive_vllms_delta_merge_which_goes_through_dicts():
    """AsyncLLM merges DELTA outputs with FlatLogprobs.extend, which drops repeated ids."""
    merged = _flat([259], [[259, 259, 3, 3, 3, 1024, 1024, 1024]])
    merged.extend(_flat([259], [[1, 1, 1, 1, 1, 1, 1, 1]]))
    assert code_channel.decode(merged) == [
        (259, [259, 259, 3, 3, 3, 1024, 1024, 1024]),
        (259, [1, 1, 1, 1, 1, 1, 1, 1]),
    ]


def test_a_step_without_the_channel_is_refused_with_the_fix():
    flat = FlatLogprobs()
    flat.append_fast([1, 2], [0.0, 0.0], range(2), [None, None])
    with pytest.raises(ValueError, match="talker_sampling_params"):
        code_channel.decode(flat)


def test_a_code_equal_to_the_lm_token_id_survives_the_delta_merge():
    """Code ids live above every text vocabulary: a codebook-0 code whose value is the LM token's id
    (259 is `<|audio|>` of the dummy tokenizer) is still a distinct id in the merged, dict-built step."""
    merged = _flat([259], [[0] * 8])
    merged.extend(_flat([259, 256], [[259, 1, 2, 3, 4, 5, 6, 7], [256, 1025, 1025, 1025, 1025, 1025, 1025, 1025]]))
    assert code_channel.decode(merged) == [
        (259, [0] * 8),
        (259, [259, 1, 2, 3, 4, 5, 6, 7]),
        (256, [256, 1025, 1025, 1025, 1025, 1025, 1025, 1025]),
    ]
