"""The sampling tables against the installed vllm.SamplingParams, and the validator's edges."""

import msgspec
import pytest

from reference.deploy.sampling import (
    LOGPROB_FIELDS,
    NEUTRAL_VALUES,
    SUPPORTED_FIELDS,
    SamplingParamsError,
    validate_sampling_params,
    vllm_sampling_fields,
)

pytestmark = pytest.mark.cpu
CLASSIFIED = set(SUPPORTED_FIELDS) | set(LOGPROB_FIELDS) | set(NEUTRAL_VALUES)


def test_tables_cover_exactly_the_vllm_fields():
    # A vLLM upgrade that adds or drops a field fails here until the field is classified.
    assert set(vllm_sampling_fields()) == CLASSIFIED
    assert not set(SUPPORTED_FIELDS) & set(NEUTRAL_VALUES)
    assert not set(LOGPROB_FIELDS) & set(NEUTRAL_VALUES)


def test_vllm_defaults_are_neutral():
    from vllm import SamplingParams

    for f in msgspec.structs.fields(SamplingParams):
        if f.name.startswith("_") or f.name in SUPPORTED_FIELDS:
            continue
        default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        validate_sampling_params({f.name: default}, "v2")
        validate_sampling_params({f.name: default}, "v1")


@pytest.mark.parametrize("runner", ["v1", "v2"])
@pytest.mark.parametrize("name", sorted(set(NEUTRAL_VALUES) | set(LOGPROB_FIELDS)))
def test_every_unsupported_field_rejects_a_non_neutral_value(name, runner):
    with pytest.raises(SamplingParamsError, match=f"'{name}'"):
        validate_sampling_params({name: "non-neutral"}, runner)


@pytest.mark.parametrize("name", sorted(NEUTRAL_VALUES))
def test_every_listed_neutral_value_passes(name):
    for value in NEUTRAL_VALUES[name]:
        assert validate_sampling_params({name: value}, "v2") == {}


def test_v2_message_names_the_v1_profile_and_v1_message_does_not_promise_it():
    with pytest.raises(SamplingParamsError) as v2:
        validate_sampling_params({"presence_penalty": 0.5}, "v2")
    with pytest.raises(SamplingParamsError) as v1:
        validate_sampling_params({"presence_penalty": 0.5}, "v1")
    assert "reference/deploy/profiles/low_latency.yaml" in str(v2.value)
    assert "does not add it either" in str(v1.value)


def test_where_prefixes_the_message():
    with pytest.raises(SamplingParamsError, match=r"^default_sampling_params in x.yaml: "):
        validate_sampling_params({"min_p": 0.5}, "v2", where="default_sampling_params in x.yaml")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True, "1.0"])
def test_temperature_rejects_non_numbers(value):
    with pytest.raises(SamplingParamsError, match="temperature"):
        validate_sampling_params({"temperature": value}, "v2")


def test_bad_arguments():
    with pytest.raises(ValueError, match="runner"):
        validate_sampling_params({}, "v3")
    with pytest.raises(SamplingParamsError, match="mapping"):
        validate_sampling_params([("top_k", 5)], "v2")


@pytest.mark.parametrize("seed", [2**63, -(2**63) - 1, 2**70])
def test_a_seed_past_64_bits_is_refused_before_it_reaches_the_engine(seed):
    """The seed lands in an int64 slot of the talker's state; before this check, 2**70 was a 500
    from inside vLLM ("extra_args integers must be between -2**63 and 2**64 - 1")."""
    for edge in (2**63 - 1, -(2**63), 0, 42):
        assert validate_sampling_params({"seed": edge}, "v2") == {"seed": edge}
    with pytest.raises(SamplingParamsError, match="'seed' must be a 64-bit signed integer"):
        validate_sampling_params({"seed": seed}, "v1")
