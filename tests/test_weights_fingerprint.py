"""The codec goldens' weight fingerprint: blind to float32 rounding, not to a changed fixture."""

import numpy as np

from conformance.codec.codec_cases import fingerprint_differences, weights_fingerprint


def _state(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"conv.weight": rng.standard_normal((64, 32, 7)).astype(np.float32),
            "conv.bias": rng.standard_normal(32).astype(np.float32) * 0.1}


def test_one_ulp_on_every_value_is_the_same_fixture():
    state = _state()
    nudged = {k: np.nextafter(v, np.float32(np.inf)) for k, v in state.items()}
    assert fingerprint_differences(weights_fingerprint(nudged), weights_fingerprint(state)) == []


def test_another_draw_is_named():
    problems = fingerprint_differences(weights_fingerprint(_state(1)), weights_fingerprint(_state(0)))
    assert [p.split(":")[0] for p in problems] == ["conv.bias", "conv.weight"]


def test_a_reshaped_tensor_is_named_even_with_equal_values():
    state = _state()
    reshaped = dict(state, **{"conv.weight": state["conv.weight"].reshape(32, 64, 7)})
    problems = fingerprint_differences(weights_fingerprint(reshaped), weights_fingerprint(state))
    assert len(problems) == 1 and "32x64x7" in problems[0] and "64x32x7" in problems[0]


def test_a_missing_or_extra_tensor_is_named():
    state = _state()
    fewer = {"conv.weight": state["conv.weight"]}
    assert fingerprint_differences(weights_fingerprint(fewer), weights_fingerprint(state)) == [
        "conv.bias: only in the golden"]
    assert fingerprint_differences(weights_fingerprint(state), weights_fingerprint(fewer)) == [
        "conv.bias: only in the fixture"]
