"""The talker under Model Runner V2: the model's own ModelState and sampler.

Everything the decode path touches lives on the device, in the per-slot buffers of
reference/talker/slots.py (the codebook row of every position of a request, the sampling
parameters), read and written with tensor indexing only, so it is correct under async
scheduling and inside CUDA graphs. `prepare_inputs` gathers each input token's row into the
model's `token_codes` buffer (which the forward, and a captured graph, read); the sampler runs
`TalkerSlots.sample` on the audio logits (replayed from CUDA graphs,
reference/talker/step_graphs.py, under the switch sampler_cudagraphs), which samples the codes
and writes the new row to the position of the token it samples.

Preemption: MRV2 removes a preempted request (with no sign of why) and adds it back later,
maybe in another slot, with prompt + outputs to re-prefill. `remove_request` therefore parks
the slot's rows (a device-side copy) under the request id and `add_request` restores them;
parked rows of requests that never come back (finished ones) are dropped oldest first beyond
`PARKED_LIMIT_PER_SLOT` requests per slot.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch
from vllm.v1.worker.gpu.input_batch import get_num_sampled_and_rejected
from vllm.v1.worker.gpu.model_states.default import DefaultModelState

from reference import compat
from reference.talker import code_channel
from reference.talker.options import options_from_hf_config
from reference.talker.prompts import reference_slots
from reference.talker.slots import TalkerSlots
from reference.talker.step_graphs import StepGraphs

PARKED_LIMIT_PER_SLOT = 4


class TalkerModelState(DefaultModelState):
    def __init__(self, vllm_config, model, encoder_cache, device):
        super().__init__(vllm_config, model, encoder_cache, device)
        options = options_from_hf_config(vllm_config.model_config.hf_config)
        if options is not None and not (options.device_talker_state and options.model_sampler):
            raise ValueError(
                "Model Runner V2 runs the talker only with device_talker_state and model_sampler on "
                f"(got {options.to_dict()}): use the V1 opt-out profile for host-side talker state"
            )
        slots = self.max_num_reqs
        self.slots = TalkerSlots(slots, vllm_config.model_config.max_model_len, model.lm_ids, device)
        self.carrier = code_channel.Carrier(slots, device)
        self.slot_of: dict[str, int] = {}
        self.parked: OrderedDict[str, torch.Tensor] = OrderedDict()
        self.parked_limit = PARKED_LIMIT_PER_SLOT * slots
        self.rng = np.random.default_rng(vllm_config.model_config.seed)
        graphs = sampler_graphs_wanted(options, vllm_config.model_config.enforce_eager, device)
        self.step_graphs = StepGraphs(self.slots.sample, slots, device) if graphs else None
        self.sample_step = self.step_graphs or self.slots.sample

    # -- request lifecycle (host side, once per request; never on the decode path) -------------
    def add_request(self, req_index: int, new_req_data) -> None:
        super().add_request(req_index, new_req_data)
        req_id, params = new_req_data.req_id, new_req_data.sampling_params
        prompt = list(new_req_data.prompt_token_ids or ())
        self.slot_of[req_id] = req_index
        parked = self.parked.pop(req_id, None)
        if parked is not None:  # resumed after preemption: the generated rows come back
            self.slots.codes[req_index].copy_(parked)
        else:
            ref_start, rows = code_channel.reference_rows(params) if params is not None else (None, [])
            reference = None
            if rows:
                reference = (reference_slots(len(prompt), ref_start, len(rows)).start, rows)
            elif len(new_req_data.prefill_token_ids or prompt) > len(prompt):
                raise RuntimeError(f"request {req_id} resumed with outputs but its code rows were never parked")
            self.slots.reset_codes(req_index, reference)
        if params is not None:
            top_k = params.top_k if params.top_k and params.top_k > 0 else 0
            seed = code_channel.request_seed(params, self.rng)
            self.slots.set_sampling(req_index, params.temperature, top_k, params.top_p, seed)

    def remove_request(self, req_id: str) -> None:
        super().remove_request(req_id)
        slot = self.slot_of.pop(req_id, None)
        if slot is None:  # ids never added (warmup, streaming re-add) are fine
            return
        self.parked[req_id] = self.slots.codes[slot].clone()
        while len(self.parked) > self.parked_limit:
            self.parked.popitem(last=False)

    # -- every step ---------------------------------------------------------------------------
    def prepare_inputs(self, input_batch, req_states) -> dict:
        inputs = super().prepare_inputs(input_batch, req_states)
        n, padded = input_batch.num_tokens, input_batch.num_tokens_after_padding
        if n == input_batch.num_reqs:  # a decode step: one token a request, in request order
            slot = input_batch.idx_mapping[:n].long()
        else:
            ends = input_batch.query_start_loc[1 : input_batch.num_reqs + 1]  # [num_reqs]
            row = torch.searchsorted(ends, torch.arange(n, dtype=ends.dtype, device=ends.device), right=True)
            slot = input_batch.idx_mapping[row].long()
        buffer = self.model.token_codes
        buffer[:n] = self.slots.codes[slot, input_batch.positions[:n]].long()
        buffer[n:padded] = -1
        return inputs

    def custom_sampler(self, sampler):
        return TalkerV2Sampler(sampler, self), None


def sampler_graphs_wanted(options, enforce_eager: bool, device) -> bool:
    """Whether the sampling step replays CUDA graphs: on CUDA, when the engine is not eager and the
    switch sampler_cudagraphs is on (an engine started without a deploy profile has no switches)."""
    on = options.sampler_cudagraphs if options is not None else True
    return torch.device(device).type == "cuda" and not enforce_eager and on


class TalkerV2Sampler:
    """Samples the talker's codes on the device; everything else is the wrapped default sampler
    (its per-slot sampling states stay up to date for the runner's own bookkeeping)."""

    def __init__(self, inner, state: TalkerModelState):
        self.inner = inner
        self.state = state

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __call__(self, logits: torch.Tensor, input_batch):
        state = self.state
        n = input_batch.num_reqs
        slot = input_batch.idx_mapping[:n]
        num_sampled, num_rejected = get_num_sampled_and_rejected(
            input_batch.seq_lens.new_ones(n),
            input_batch.seq_lens,
            input_batch.cu_num_logits,
            input_batch.idx_mapping,
            self.inner.req_states.prefill_len.gpu,
        )
        lm_tokens, ids = state.sample_step(
            state.model.last_audio_logits[:n],
            slot,
            input_batch.positions[input_batch.logits_indices[:n]],  # each row's last input token
            self.inner.req_states.prompt_len.gpu[slot],
            num_sampled,
        )
        return compat.v2_sampler_output(
            sampled_token_ids=lm_tokens[:, None],
            logprobs_tensors=state.carrier(ids),
            num_sampled=num_sampled,
            num_rejected=num_rejected,
        )
