"""The talker under Model Runner V1: a worker that swaps in a runner subclass with a talker sampler.

V1 has no model hook for state or sampling, so the least invasive supported route is the
`worker_cls` engine argument. The worker builds vLLM's own runner, then gives it the talker
mixin below, which
- keeps each request's codebook rows by position on the host (the prompt's reference slots and
  generated rows), so a re-prefill after preemption rebuilds the audio feedback exactly;
- fills the model's `token_codes` buffer right before each forward (`_preprocess`);
- replaces the sampler with `TalkerV1Sampler`, which runs reference/talker/step.py and sends the
  8 codes of every step back in-band as flat logprobs (see reference/talker/code_channel.py).
Host-side state means one device->host copy of the sampled codes per step: acceptable for the
V1 opt-out; the V2 route keeps everything on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from vllm.v1.sample.sampler import Sampler

from reference import compat
from reference.talker import code_channel
from reference.talker.prompts import reference_slots
from reference.codebooks import NUM_CODEBOOKS
from reference.talker.step import talker_step


@dataclass
class HostTalkerRequest:
    prompt_len: int
    seed: int
    codes: np.ndarray  # [prompt_len + max_tokens + 1, 8] row per position, -1 for text tokens


def _new_host_request(req_state, rng: np.random.Generator) -> HostTalkerRequest:
    prompt_len = len(req_state.prompt_token_ids)
    params = req_state.sampling_params
    codes = np.full((prompt_len + (params.max_tokens or 0) + 1, NUM_CODEBOOKS), -1, dtype=np.int64)
    ref_start, rows = code_channel.reference_rows(params)
    if rows:
        slots = reference_slots(prompt_len, ref_start, len(rows))
        codes[slots.start : slots.stop] = np.asarray(rows, dtype=np.int64)
    return HostTalkerRequest(prompt_len=prompt_len, seed=code_channel.request_seed(params, rng), codes=codes)


class TalkerV1RunnerMixin:
    """Mixed into vLLM's V1 GPUModelRunner / CPUModelRunner by `TalkerWorker`."""

    def _talker_init(self) -> None:
        self.talker_requests: dict[str, HostTalkerRequest] = {}
        self.talker_rows: list[tuple[str, int] | None] = []  # per logits row: (req_id, output index)
        self.talker_rng = np.random.default_rng(self.model_config.seed)

    def load_model(self, *args, **kwargs):
        result = super().load_model(*args, **kwargs)
        self.sampler = TalkerV1Sampler(self)
        return result

    def _update_states(self, scheduler_output, *args, **kwargs):
        for req_id in scheduler_output.finished_req_ids:
            self.talker_requests.pop(req_id, None)
        return super()._update_states(scheduler_output, *args, **kwargs)

    def _preprocess(self, scheduler_output, num_input_tokens, *args, **kwargs):
        self._fill_token_codes(scheduler_output, num_input_tokens)
        return super()._preprocess(scheduler_output, num_input_tokens, *args, **kwargs)

    def _fill_token_codes(self, scheduler_output, num_input_tokens: int) -> None:
        model = self.get_model()
        chunks, self.talker_rows = [], []
        batch = self.input_batch
        for i, req_id in enumerate(batch.req_ids):
            req_state = self.requests[req_id]
            host = self.talker_requests.get(req_id)
            if host is None:
                host = self.talker_requests[req_id] = _new_host_request(req_state, self.talker_rng)
            start = int(batch.num_computed_tokens_cpu[i])
            end = start + scheduler_output.num_scheduled_tokens[req_id]
            chunks.append(host.codes[start:end])
            # A partial prefill chunk samples nothing: its row of logits is discarded.
            real = end >= req_state.num_tokens
            self.talker_rows.append((req_id, end - host.prompt_len) if real else None)
        codes = np.concatenate(chunks) if chunks else np.empty((0, NUM_CODEBOOKS), dtype=np.int64)
        model.token_codes[: len(codes)].copy_(torch.from_numpy(codes))
        model.token_codes[len(codes) : num_input_tokens].fill_(-1)


class TalkerV1Sampler(Sampler):
    """Samples the talker's codes and forces the LM token; never touches vLLM's vocab sampler."""

    def __init__(self, runner: TalkerV1RunnerMixin):
        super().__init__()
        self.runner = runner

    def forward(self, logits: torch.Tensor, sampling_metadata, *args, **kwargs):
        runner, model = self.runner, self.runner.get_model()
        num_rows = logits.shape[0]
        rows = runner.talker_rows if len(runner.talker_rows) == num_rows else [None] * num_rows  # dummy run
        prev = np.full((num_rows, NUM_CODEBOOKS), -1, dtype=np.int64)
        step = np.zeros(num_rows, dtype=np.int64)
        seed = np.zeros(num_rows, dtype=np.int64)
        temperature, top_k, top_p = np.zeros(num_rows), np.zeros(num_rows, dtype=np.int64), np.ones(num_rows)
        for i, row in enumerate(rows):
            if row is None:
                continue
            req_id, index = row
            host, params = runner.talker_requests[req_id], runner.requests[req_id].sampling_params
            step[i], seed[i] = index, host.seed
            if index > 0:
                prev[i] = host.codes[host.prompt_len + index - 1]
            temperature[i], top_k[i], top_p[i] = params.temperature, params.top_k or 0, params.top_p
        device = logits.device
        codes, done = talker_step(
            model.last_audio_logits[:num_rows],
            torch.from_numpy(prev).to(device),
            torch.from_numpy(step).to(device),
            torch.from_numpy(temperature).float().to(device),
            torch.from_numpy(top_k).to(device),
            torch.from_numpy(top_p).float().to(device),
            torch.from_numpy(seed).to(device),
        )
        codes_host = codes.cpu().numpy()
        for i, row in enumerate(rows):
            if row is not None:
                req_id, index = row
                host = runner.talker_requests[req_id]
                host.codes[host.prompt_len + index] = codes_host[i]
        lm_tokens = torch.where(done, model.lm_ids[1], model.lm_ids[0])
        want_channel = compat.sampling_wants_logprobs(sampling_metadata)
        return compat.sampler_output(
            sampled_token_ids=lm_tokens.to(torch.int32)[:, None],
            logprobs_tensors=code_channel.encode(lm_tokens, codes) if want_channel else None,
        )


def talker_runner_class(base: type) -> type:
    """vLLM's runner class with the talker mixin in front (one class per base, cached)."""
    cached = _RUNNER_CLASSES.get(base)
    if cached is None:
        cached = _RUNNER_CLASSES[base] = type(f"Talker{base.__name__}", (TalkerV1RunnerMixin, base), {})
    return cached


_RUNNER_CLASSES: dict[type, type] = {}
