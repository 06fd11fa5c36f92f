"""vllm-omni 0.30.0's Higgs v3 delay code on our inputs, with stand-ins for vLLM: `tox -e diff-vllm-omni`.

vllm-omni is installed without its dependencies (it pins a CUDA vLLM) and never imported as a
package (its __init__ patches vLLM). Two of its files are loaded by path, with stand-ins in
sys.modules for the names they import from vLLM and from vllm_omni modules that need vLLM:
- model_executor/stage_input_processors/higgs_audio_v3.py: `talker2code2wav` on the rows of every
  talker golden stream (golden/talker/streams.json), as finished talker outputs; `_revert_delay_pattern`
  on the delay check's rows, beside model_executor/models/higgs_audio_v3/higgs_audio_v3_tokenizer.py's
  `apply_delay_pattern` (the voice-clone prompt's reference rows; numpy and torch only);
  stand-ins: vLLM's logger, `OmniTokensPrompt` (a dict: upstream only builds it), and its own
  data_entry_keys.py loaded by path (it needs msgspec, not vLLM);
- model_executor/models/higgs_audio_v3/higgs_audio_v3_talker.py: the talker's delay state,
  `_apply_delay_pattern_masking_batched` then a greedy argmax then `_update_delay_state_batched`
  (the row and its done flag from the host staging buffer), on an instance made without its
  constructor (which builds the Qwen3 body through vLLM) and given the state buffers the
  constructor would (the names and shapes of its __init__). Every vLLM name the file imports is a
  placeholder class: none of them is reached by those two methods.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import types
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from conformance.differential import delay_grids, state_machine
from conformance.differential.inputs import NUM_CODEBOOKS
from conformance.differential.verdicts import ROOT, Check, write_results
from conformance.module_files import load_module_file
from conformance.oracles import delay_numpy

TALKER_GOLDEN = ROOT / "golden" / "talker" / "streams.json"
NOT_IN_IT = ("vllm-omni decodes with the model's bundled codec through vLLM (code2wav stage); "
             "the codec is compared against boson and transformers")
ENCODES_WITH_TRANSFORMERS = ("vllm-omni encodes reference audio with transformers' HiggsAudioV2TokenizerModel "
                             "(model_executor/models/higgs_audio_v2/higgs_audio_v2_tokenizer.py:247): the transformers column")


class _StandIns(types.ModuleType):
    """A stand-in module: any attribute not set is a placeholder class of that name."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        placeholder = type(name, (), {"__module__": self.__name__})
        setattr(self, name, placeholder)
        return placeholder


def _install_stand_ins(package: Path) -> None:
    for name in ("vllm", "vllm.config", "vllm.logger", "vllm.model_executor", "vllm.model_executor.layers",
                 "vllm.model_executor.layers.logits_processor", "vllm.model_executor.layers.vocab_parallel_embedding",
                 "vllm.model_executor.models", "vllm.model_executor.models.qwen3", "vllm.platforms", "vllm.v1",
                 "vllm.v1.outputs", "vllm.v1.sample", "vllm.v1.sample.metadata", "vllm.v1.sample.ops",
                 "vllm.v1.sample.ops.topk_topp_sampler", "vllm_omni", "vllm_omni.inputs", "vllm_omni.inputs.data",
                 "vllm_omni.model_executor", "vllm_omni.model_executor.models",
                 "vllm_omni.model_executor.models.output_templates", "vllm_omni.transformers_utils",
                 "vllm_omni.transformers_utils.configs", "vllm_omni.transformers_utils.configs.higgs_audio_v3"):
        module = _StandIns(name)
        module.__path__ = []  # type: ignore[attr-defined]
        sys.modules[name] = module
    sys.modules["vllm.logger"].init_logger = logging.getLogger  # type: ignore[attr-defined]
    sys.modules["vllm_omni.inputs.data"].OmniTokensPrompt = dict  # type: ignore[attr-defined]
    load_module_file("vllm_omni.data_entry_keys", package / "data_entry_keys.py")


def upstream_package() -> Path:
    spec = importlib.util.find_spec("vllm_omni")  # finds the folder without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("vllm-omni is not installed in this environment: run `tox -e diff-vllm-omni`")
    return Path(list(spec.submodule_search_locations)[0])


def talker_state(talker_module: types.ModuleType) -> Any:
    """An upstream talker instance holding only the delay state its __init__ would create."""
    cls = talker_module.HiggsAudioV3TalkerForConditionalGeneration
    talker = cls.__new__(cls)
    nn.Module.__init__(talker)
    rows = 64  # __init__: max(64, max_num_seqs)
    talker.num_codebooks = NUM_CODEBOOKS
    talker._decode_last_codes = torch.zeros(rows, NUM_CODEBOOKS, dtype=torch.long)
    talker._decode_has_codes = torch.zeros(rows, dtype=torch.bool)
    talker._decode_delay_count = torch.zeros(rows, dtype=torch.long)
    talker._decode_eoc_countdown = torch.full((rows,), -1, dtype=torch.long)
    talker._decode_generation_done = torch.zeros(rows, dtype=torch.bool)
    talker._codebook_index_cache, talker._row_index_cache = {}, {}
    talker._last_audio_gpu_staging = talker._last_audio_host_staging = None
    talker._audio_staging_events, talker._audio_staging_event_cursor = [], 0
    return talker


def state_machine_check(talker_module: types.ModuleType) -> Check:
    def make_stepper():
        talker = talker_state(talker_module)
        request = torch.tensor([0])

        def step(logits: np.ndarray):
            cb_logits = torch.from_numpy(logits).clone()[None]  # [1, 8, 1026]
            talker._apply_delay_pattern_masking_batched(cb_logits, request, all_rows=True)
            codes = cb_logits.argmax(dim=-1)  # greedy [1, 8]
            talker._update_delay_state_batched(codes, request, 1, torch.device("cpu"), all_rows=True)
            staged = talker._last_audio_host_staging[0]  # [8 codes, valid, done]
            return staged[:NUM_CODEBOOKS].tolist(), bool(staged[NUM_CODEBOOKS + 1])

        return step

    return state_machine.run(make_stepper)


def talker2code2wav_check(stage: types.ModuleType) -> Check:
    """Every talker golden stream's rows through talker2code2wav, against reference.codec's offline path."""
    from reference.codec.delay_pattern import rows_to_frames

    check = Check("talker2code2wav", "exact: the frames handed to the codec")
    doc = json.loads(TALKER_GOLDEN.read_text())
    streams = {**doc["streams"], **{f"{flavour}/{k}": v for flavour, group in doc["flavours"].items()
                                    for k, v in group.items()}}
    for stream_id, stream in streams.items():
        rows = torch.tensor(stream["rows"], dtype=torch.long)  # [L, 8]
        output = types.SimpleNamespace(finished=True, outputs=[types.SimpleNamespace(
            multimodal_output={"codes": {"audio": rows}})])
        (prompt,) = stage.talker2code2wav([output])
        theirs = np.asarray(prompt["prompt_token_ids"], dtype=np.int64).reshape(NUM_CODEBOOKS, -1)
        ours = np.asarray(rows_to_frames(rows.numpy()))
        oracle = delay_numpy.undelayed_frames(rows.numpy())
        oracle = oracle[:, (oracle < 1024).all(axis=0)]
        ending = "finished" if stream["finished"] else "cut by max_tokens"
        if not np.array_equal(ours, oracle):
            check.add(stream_id, "ours_disagree", f"reference {ours.shape[1]} frames, oracle {oracle.shape[1]}")
        elif theirs.shape == ours.shape and np.array_equal(theirs, ours):
            check.add(stream_id, None, f"{ending}: {ours.shape[1]} frames equal")
        elif theirs.shape[1] == ours.shape[1] - 1 and np.array_equal(theirs, ours[:, :-1]):
            check.add(stream_id, "drops_last_frame", f"{ending}: ours {ours.shape[1]} frames, theirs the first {theirs.shape[1]}")
        else:
            check.add(stream_id, "unexplained", f"{ending}: ours {ours.shape}, theirs {theirs.shape}")
    return check


def main() -> int:
    torch.set_num_threads(1)
    package = upstream_package()
    _install_stand_ins(package)
    stage = load_module_file("vllm_omni.model_executor.stage_input_processors.higgs_audio_v3",
                  package / "model_executor" / "stage_input_processors" / "higgs_audio_v3.py")
    talker = load_module_file("vllm_omni.model_executor.models.higgs_audio_v3.higgs_audio_v3_talker",
                   package / "model_executor" / "models" / "higgs_audio_v3" / "higgs_audio_v3_talker.py")

    prompts = load_module_file("vllm_omni.model_executor.models.higgs_audio_v3.higgs_audio_v3_tokenizer",
                    package / "model_executor" / "models" / "higgs_audio_v3" / "higgs_audio_v3_tokenizer.py")

    def apply(codes: np.ndarray) -> np.ndarray:  # the voice-clone prompt's delay pattern: [T, N] -> [T + N - 1, N]
        return prompts.apply_delay_pattern(torch.from_numpy(np.ascontiguousarray(codes.T))).numpy()

    def revert(rows: np.ndarray) -> np.ndarray:
        return stage._revert_delay_pattern(torch.from_numpy(np.ascontiguousarray(rows.T))).numpy()

    checks = [delay_grids.run(apply, revert), state_machine_check(talker),
              Check("codec_decode", cannot_run=NOT_IN_IT), Check("encoder_codes", cannot_run=ENCODES_WITH_TRANSFORMERS),
              talker2code2wav_check(stage)]
    versions = {name: version(name) for name in ("vllm-omni", "torch")}
    print(json.dumps({"written": str(write_results("vllm-omni", versions, checks))}))
    from conformance.differential.report import print_and_exit_status

    return print_and_exit_status("vllm-omni")


if __name__ == "__main__":
    sys.exit(main())
