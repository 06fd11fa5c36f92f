"""Check that the GPU checks catch planted defects in the Model Runner V2 route (needs CUDA).

    python -m conformance.mutations.gpu [--baseline] [--list] [--jobs N] [INDEX ...]

The V2 route (reference/talker/runner_v2.py and slots.py, and the parts of reference/talker/model.py only
CUDA graphs exercise) runs nowhere but on a GPU, so its mutations live here rather than in
conformance/mutations/talker.py (CPU). Each one copies the tree, plants one defect and runs the V2
selection meant to catch it; RED means caught. The engines of different mutations share the GPU
(conformance/engines.py fixes their KV cache size), so `--jobs 3` runs three at once.

The last ones plant an engine that does not build the CUDA graphs the profile asks for; a CUDA
case of conformance/deploy/test_profile_boot.py must catch it in the read-back of what vLLM built
(reference/deploy/readback.py).
"""

from __future__ import annotations

import sys

from conformance.mutations.deploy import boot_case
from conformance.mutations.talker import LOCAL_SHARD_AUDIO_HEAD, LOCAL_SHARD_EDIT, streams, tensor_parallel
from conformance.mutations.run import Mutation, main, mutations_from_table

V2, SL, TM = "reference/talker/runner_v2.py", "reference/talker/slots.py", "reference/talker/model.py"
LA, WK = "reference/deploy/launch.py", "reference/talker/worker.py"


# (name, file, old text, new text, pytest arguments that must fail)
MUTATIONS: list[tuple[str, str, str, str, tuple[str, ...]]] = [
    ("V2 model state feeds each token the row one position early", V2,
     "buffer[:n] = self.slots.codes[slot, input_batch.positions[:n]].long()",
     "buffer[:n] = self.slots.codes[slot, input_batch.positions[:n] - 1].long()", streams("one_zero_shot", "v2-eager")),
    ("V2 sampler gives the contract step the wrong previous row (ramp-down state)", SL,
     "self.codes[slot, pos].long(),  # the input token's row",
     "self.codes[slot, pos - 1].long(),  # the input token's row", streams("one_zero_shot", "v2-graphs")),
    ("V2 sampler writes rows for partial prefill chunks", SL,
     "written = torch.where(num_sampled > 0, pos + 1, self.discard)",
     "written = pos + 1", streams("long_prompt_chunked", "v2-eager")),
    ("V2 preemption loses the generated rows (parks an empty slot)", V2,
     "self.parked[req_id] = self.slots.codes[slot].clone()",
     "self.parked[req_id] = torch.full_like(self.slots.codes[slot], -1)", streams("preempted_and_resumed", "v2-eager")),
    ("V2 reference rows placed one position late", SL,
     "self.codes[slot, start : start + len(rows)].copy_(staged, non_blocking=True)",
     "self.codes[slot, start + 1 : start + 1 + len(rows)].copy_(staged, non_blocking=True)",
     streams("one_voice_clone", "v2-eager")),
    ("V2 per-request seed ignored", SL,
     "self.seed[slot].fill_(seed)",
     "self.seed[slot].fill_(0)",
     ("conformance/talker/test_seeded_sampling.py", "-k", "seeded_request and v2")),
    ("body input freshly allocated (piecewise CUDA graphs read the captured address)", TM,
     "inputs_embeds = self.inputs_embeds[:num_tokens]\n            inputs_embeds.copy_(mixed)",
     "inputs_embeds = mixed", streams("one_zero_shot", "v2-graphs")),
    # What vLLM built, read back at boot: FULL decode graphs asked, PIECEWISE built.
    ("launcher passes PIECEWISE where the profile asks FULL decode graphs", LA,
     '    compilation["cudagraph_mode"] = asked if asked is not None and not eager else derived',
     '    compilation["cudagraph_mode"] = asked if asked is not None and not eager else derived.replace("FULL_AND_", "")',
     boot_case("default_on_cuda")),
    ("engine asked FULL_AND_PIECEWISE builds PIECEWISE (a silent downgrade inside the worker)", WK,
     "        result = super().init_device(*args, **kwargs)",
     "        config = self.vllm_config.compilation_config\n"
     '        if config.cudagraph_mode.name == "FULL_AND_PIECEWISE":\n'
     "            config.cudagraph_mode = type(config.cudagraph_mode).PIECEWISE\n"
     "        result = super().init_device(*args, **kwargs)",
     boot_case("low_latency_v2_on_cuda")),
    ("launcher passes only the two smallest capture sizes (FULL graphs up to 2, the profile asks 64)", LA,
     '        compilation["cudagraph_capture_sizes"] = sorted(compilation["cudagraph_capture_sizes"])',
     '        compilation["cudagraph_capture_sizes"] = sorted(compilation["cudagraph_capture_sizes"])[:2]',
     boot_case("high_throughput_v2_on_cuda")),
]
# Two GPUs (the two-GPU machine): the V2 route under tensor parallel.
PARALLEL_MUTATIONS = [
    (f"{LOCAL_SHARD_AUDIO_HEAD}, V2 graphs", TM, *LOCAL_SHARD_EDIT, tensor_parallel("tp2-v2-graphs")),
]


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def mutations() -> list[Mutation]:
    """This machine's: the tensor-parallel ones need two GPUs."""
    table = MUTATIONS + (PARALLEL_MUTATIONS if gpu_count() >= 2 else [])
    if gpu_count() < 2:
        print(f"mutations gpu: {len(PARALLEL_MUTATIONS)} tensor-parallel mutation(s) left out: they need two GPUs")
    return mutations_from_table(table)


if __name__ == "__main__":
    raise SystemExit(main(mutations(), sys.argv[1:], prefix="mutate_gpu_"))
