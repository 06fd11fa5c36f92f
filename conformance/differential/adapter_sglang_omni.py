"""sglang-omni 0.1.9's Higgs v3 code on our inputs, with stand-ins for sglang: `tox -e diff-sglang-omni`.

sglang-omni pins sglang 0.5.22, torch 2.14.1 and CUDA packages (flashinfer, sgl-kernel): it is installed without
its dependencies and never imported as a package (`sglang_omni/__init__.py` and `sglang_omni/platforms/__init__.py`
import sglang). Its files are loaded by path (paths below inside `sglang_omni/`), with stand-ins in sys.modules
for the names they import from sglang and from sglang_omni modules that need it; the code run is plain torch and
transformers' `HiggsAudioV2TokenizerModel` (transformers 5.19.0, its pin):

- `utils/codec_delay.py` `reverse_delay_pattern` and `models/higgs_tts/utils.py` `apply_delay_pattern` (the
  reference audio's delay, stages.py:262 and :412): the delay check;
- `models/higgs_tts/sampler.py`: `batched_step` on a `HiggsBatchedSamplerState` of one row, greedy (temperature 0:
  argmax over the raw logits, sampler.py:311-316), as the eager prefill path calls it (model.py:359); the renorm
  kernels are its own torch fallback (npu_fallback.py, the path of every platform but CUDA, sampler.py:41-52) and
  sglang's `multinomial_with_seed` a stand-in whose draws a row without a seed never keeps (sampler.py:346-356);
- `models/higgs_tts/vocoder_scheduler.py` `prepare_vocoder_item`: the rows of every talker golden stream to the
  frames its vocoder decodes (revert, codes >= 1024 set to 0, every frame kept);
- `models/higgs_tts/audio_codec.py` `HiggsAudioCodec.from_pretrained` and `decode`: the codec goldens, float32 and
  bfloat16 (the vocoder stage's default dtype, stages.py:606), from a checkpoint folder holding the golden's codec
  under the checkpoint's prefix. As released it builds the codec from a config written into the wheel
  (`configs/higgs_audio_v2_tokenizer.json`, decoder width 1024: audio_codec.py:46-50, 198), not from the
  checkpoint's `audio_tokenizer_config`: the tiny codec (width 64) does not load (a sub-case). The decode cases run
  with that path pointed at the tiny checkpoint's own `audio_tokenizer_config`, in this process only.

And, recorded under `ran` (not a check): whether its loaders take the 4b dummy checkpoint's parts, the codec
(bundled config, the 4b codec and encoder tensors), the tokenizer (`HiggsTokenizerAdapter` on tokenizer.json), the
config class and the weight names (`DiscreteWeightMapper` with model.py's prefix map).
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import json
import sys
import tempfile
import types
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch

from conformance.codec import codec_cases as golden_codec
from conformance.differential import codec_cases, delay_grids, state_machine
from conformance.differential.adapter_vllm_omni import TALKER_GOLDEN, _StandIns
from conformance.differential.inputs import BOC, EOC, NUM_CODEBOOKS, scenario_logits, scenarios
from conformance.differential.verdicts import Check, write_results
from conformance.module_files import load_module_file
from conformance.oracles import delay_numpy

CODEC_PREFIX = "tied.embedding.modality_embeddings.0.model."
ENCODER_IS_TRANSFORMERS = ("sglang-omni encodes reference audio with transformers' HiggsAudioV2TokenizerModel.encode "
                           "(models/higgs_tts/audio_codec.py:347): the transformers column")
NO_ENGINE = ("its talker runs only inside sglang's engine (model.py:10-12: sglang's Qwen3ForCausalLM and scheduler, "
             "CUDA or NPU; sglang 0.5.22 is not installed here)")


def upstream_package() -> Path:
    spec = importlib.util.find_spec("sglang_omni")  # the folder, without running its __init__ (it imports sglang)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("sglang-omni is not installed in this environment: run `tox -e diff-sglang-omni`")
    return Path(list(spec.submodule_search_locations)[0])


def _torchaudio_stand_in() -> None:
    """transformers' tokenizer module and audio_codec.py import torchaudio, which has no build for this torch; decode
    never calls it (only encode resamples). A module whose resample refuses, and transformers' backend check told
    it is there."""
    from transformers.utils import import_utils

    stub = types.ModuleType("torchaudio")
    stub.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)

    def resample(*args, **kwargs):
        raise RuntimeError("torchaudio stand-in: the decode path does not resample")

    stub.functional = types.SimpleNamespace(resample=resample)
    sys.modules["torchaudio"] = stub
    sys.modules["torchaudio.functional"] = stub.functional  # type: ignore[assignment]
    import_utils.BACKENDS_MAPPING["torchaudio"] = (lambda: True, import_utils.BACKENDS_MAPPING["torchaudio"][1])
    # transformers decided at its import that the class needs a missing backend and exports a placeholder under
    # the top-level name audio_codec.py imports (audio_codec.py:30): the real class, from its module.
    import transformers
    from transformers.models.higgs_audio_v2_tokenizer import modeling_higgs_audio_v2_tokenizer as hf

    transformers.HiggsAudioV2TokenizerModel = hf.HiggsAudioV2TokenizerModel


def _install_stand_ins(package: Path) -> dict[str, types.ModuleType]:
    """sglang and the sglang_omni modules that need it, as placeholder modules; the files run, loaded by path."""
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.sampler",
                 "sglang.srt.layers.logits_processor", "sglang.srt.models", "sglang.srt.models.qwen3",
                 "sglang.srt.runtime_context", "sglang_omni", "sglang_omni.utils", "sglang_omni.utils.checkpoint",
                 "sglang_omni.platforms", "sglang_omni.platforms.device_graph", "sglang_omni.preprocessing",
                 "sglang_omni.preprocessing.audio", "sglang_omni.preprocessing.base",
                 "sglang_omni.preprocessing.resource_connector", "sglang_omni.sampling", "sglang_omni.sampling.seed",
                 "sglang_omni.models", "sglang_omni.models.higgs_tts"):
        module = _StandIns(name)
        module.__path__ = []  # type: ignore[attr-defined]
        sys.modules[name] = module
    # Every platform but CUDA takes the sampler's torch renorm fallback (sampler.py:41-52); a CPU pool.
    sys.modules["sglang_omni.platforms"].current_platform = types.SimpleNamespace(  # type: ignore[attr-defined]
        device_type="cpu", is_npu=lambda: False, enable_codec_decode_graph=lambda: False,
        get_device_graph_backend=lambda device: None)

    def multinomial_with_seed(logprobs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # Called on every step (sampler.py:352); kept only for rows with a seed, and these rows have none.
        return torch.full((logprobs.shape[0], 1), -7, dtype=torch.long)

    sys.modules["sglang.srt.layers.sampler"].multinomial_with_seed = multinomial_with_seed  # type: ignore[attr-defined]
    _torchaudio_stand_in()
    higgs = package / "models" / "higgs_tts"
    files = {
        "codec_delay": ("sglang_omni.utils.codec_delay", package / "utils" / "codec_delay.py"),
        "audio_codec": ("sglang_omni.models.higgs_tts.audio_codec", higgs / "audio_codec.py"),
        "utils": ("sglang_omni.models.higgs_tts.utils", higgs / "utils.py"),
        "npu_fallback": ("sglang_omni.models.higgs_tts.npu_fallback", higgs / "npu_fallback.py"),
        "reset_kernels": ("sglang_omni.models.higgs_tts.reset_kernels", higgs / "reset_kernels.py"),
        "sampler": ("sglang_omni.models.higgs_tts.sampler", higgs / "sampler.py"),
        "hf_config": ("sglang_omni.models.higgs_tts.hf_config", higgs / "hf_config.py"),
        "text_tokenizer": ("sglang_omni.models.higgs_tts.text_tokenizer", higgs / "text_tokenizer.py"),
        "weight_loader": ("sglang_omni.models.higgs_tts.weight_loader", higgs / "weight_loader.py"),
        "modeling": ("sglang_omni.models.higgs_tts.modeling", higgs / "modeling.py"),
        "model": ("sglang_omni.models.higgs_tts.model", higgs / "model.py"),
    }
    return {key: load_module_file(name, path) for key, (name, path) in files.items()}


# --- the delay pattern and the state machine --------------------------------------------------------------------

def delay_check(mods: dict[str, types.ModuleType]) -> Check:
    def apply(codes: np.ndarray) -> np.ndarray:  # [T, N] -> [T + N - 1, N]
        return mods["utils"].apply_delay_pattern(torch.from_numpy(np.ascontiguousarray(codes.T))).numpy()

    def revert(rows: np.ndarray) -> np.ndarray:  # [L, N] -> [L - N + 1, N]
        return mods["codec_delay"].reverse_delay_pattern(torch.from_numpy(np.ascontiguousarray(rows))).numpy().T

    return delay_grids.run(apply, revert)


def their_rule(logits: np.ndarray) -> list[list[int]]:
    """Our statement of sglang-omni's greedy rule, read from sampler.py:444-531 (to name a difference, never to
    judge): argmax of the raw logits (no mask); at step s < 8 codebooks above s forced to BOC; an EOC on codebook 0
    counts from step 8 on (the first 8 steps are its lead-in, sampler.py:488-496) and then 6 more rows are drawn as
    they come, the last one ending the audio (sampler.py:501-507)."""
    rows, countdown = [], None
    for step in range(logits.shape[0]):
        row = logits[step].argmax(axis=-1)
        row[np.arange(NUM_CODEBOOKS) > step] = BOC
        rows.append([int(c) for c in row])
        if countdown is not None:
            countdown -= 1
            if countdown <= 0:
                break
        elif step >= NUM_CODEBOOKS and row[0] == EOC:
            countdown = NUM_CODEBOOKS - 2
    return rows


def _name_difference(logits: np.ndarray, theirs: list[list[int]]) -> tuple[str | None, str]:
    """None where their rows are ours; else the kinds of difference their rows show, when they are
    what our statement of their rule gives (their_rule), and "unexplained" when they are not. The kinds are
    joined by "_and_" (a difference id is one word of the case schema's alphabet)."""
    ours = state_machine.ours(logits)
    if theirs == ours:
        return None, f"{len(theirs)} rows equal"
    detail = state_machine._explain(ours, theirs)
    if theirs != their_rule(logits):
        return "unexplained", detail + "; not as their_rule reads it either"
    rows = np.array(theirs, dtype=np.int64)
    step = np.arange(len(rows))[:, None]
    q = np.arange(NUM_CODEBOOKS)[None, :]
    kinds = []
    if ((rows == BOC) & (q <= step)).any():
        kinds.append("boc_not_masked")  # BOC drawn on an active codebook
    if ((rows == EOC) & (q > 0)).any():
        kinds.append("eoc_not_masked")  # EOC drawn on codebooks 1-7 (only codebook 0's counts)
    eoc_steps = np.flatnonzero(rows[:, 0] == EOC)
    if (eoc_steps < NUM_CODEBOOKS).any():
        kinds.append("lead_in_eoc_ignored")  # an EOC in its 8-step lead-in kept as a code, the stream going on
    if (eoc_steps >= NUM_CODEBOOKS).any():
        kinds.append("wind_down_unforced")  # after the EOC row 6 rows as drawn, none forced to EOC; ours 7, forced
    return "_and_".join(kinds) or "unexplained", detail


def state_machine_check(mods: dict[str, types.ModuleType]) -> Check:
    sampler = mods["sampler"]
    check = Check("state_machine", state_machine.TOLERANCE + " (their batched_step, greedy)")
    for scenario in scenarios():
        pool = sampler.HiggsBatchedSamplerState(max_batch_size=1, num_codebooks=NUM_CODEBOOKS, device="cpu")
        rows_index = torch.tensor([0])

        def step(logits: np.ndarray) -> tuple[list[int], bool]:
            codes = sampler.batched_step(torch.from_numpy(logits).float()[None], pool, rows_index,
                                         temperature=torch.zeros(1), top_p=None, top_k_buf=None)
            return codes[0].tolist(), bool(pool.generation_done[0])

        logits = scenario_logits(scenario)
        difference, detail = _name_difference(logits, state_machine.theirs(logits, step))
        check.add(scenario["id"], difference, detail)
    return check


# --- the vocoder's tail -----------------------------------------------------------------------------------------

def vocoder_tail_check(mods: dict[str, types.ModuleType], vocoder: types.ModuleType) -> Check:
    """Every talker golden stream's rows as the tts_engine's output, through the vocoder's prepare_vocoder_item (the
    whole-answer path, vocoder_scheduler.py:428-447), against reference.codec's offline frames."""
    from reference.codec.delay_pattern import rows_to_frames

    check = Check("talker2code2wav", "exact: the frames handed to the codec")
    doc = json.loads(TALKER_GOLDEN.read_text())
    streams = {**doc["streams"], **{f"{flavour}/{k}": v for flavour, group in doc["flavours"].items()
                                    for k, v in group.items()}}
    scheduler = vocoder.HiggsStreamingVocoderScheduler.__new__(vocoder.HiggsStreamingVocoderScheduler)
    for stream_id, stream in streams.items():
        state = types.SimpleNamespace(output_codes_delayed=stream["rows"], num_codebooks=NUM_CODEBOOKS,
                                      codebook_size=1026)
        payload = types.SimpleNamespace(data={})
        vocoder.HiggsTtsState.from_dict = staticmethod(lambda data, s=state: s)  # the stage payload's state
        _, codes_tn = scheduler.prepare_vocoder_item(payload)
        theirs = codes_tn.numpy().T  # [8, T]
        rows = np.asarray(stream["rows"], dtype=np.int64)
        ours = np.asarray(rows_to_frames(rows))
        reverted = delay_numpy.undelayed_frames(rows)
        ending = "finished" if stream["finished"] else "cut by max_tokens"
        if theirs.shape == ours.shape and np.array_equal(theirs, ours):
            check.add(stream_id, None, f"{ending}: {ours.shape[1]} frames equal")
        elif (theirs.shape == reverted.shape and np.array_equal(theirs, np.where(reverted >= 1024, 0, reverted))
              and np.array_equal(theirs[:, :ours.shape[1]], ours)):
            partial = reverted[:, ours.shape[1]:]
            check.add(stream_id, "keeps_partial_frames_as_code_0",
                      f"{ending}: ours {ours.shape[1]} frames, theirs {theirs.shape[1]}: the last "
                      f"{partial.shape[1]} frame(s), holding {int((partial >= 1024).sum())} BOC/EOC codes, kept with "
                      f"those codes set to 0")
        else:
            check.add(stream_id, "unexplained", f"{ending}: ours {ours.shape}, theirs {theirs.shape}")
    return check


# --- the codec --------------------------------------------------------------------------------------------------

def _write_codec_checkpoint(folder: Path, tensors: dict[str, torch.Tensor]) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({CODEC_PREFIX + k: v.contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    return folder


def codec_check(codec_module: types.ModuleType, work: Path) -> Check:
    from higgs_dummy.encoder_weights import encoder_state_dict, with_encoder_config

    spec = codec_cases._doc()["codec"]
    state = {**codec_cases.fixture_state(), **encoder_state_dict(spec["size"], int(spec["seed"]))}
    folder = _write_codec_checkpoint(work / "tiny-codec", state)
    check = Check("codec_decode", codec_cases.TOLERANCE + "; float32 as its from_pretrained's default, and "
                  "bfloat16 as its vocoder stage loads it (stages.py:606)")
    released = codec_module._BUNDLED_CODEC_CONFIG_PATH
    # The checkpoint's audio_tokenizer_config as transformers' config class takes it: without num_codebooks and
    # hidden_size, which that class derives (8 quantizers from target_bandwidths; 1024 = 256 acoustic + 768 semantic).
    own_config = {k: v for k, v in with_encoder_config(codec_cases.fixture_config(), spec["size"]).items()
                  if k not in ("num_codebooks", "hidden_size")}
    try:
        codec_module.HiggsAudioCodec.from_pretrained(str(folder), device="cpu")
        check.add("as_released", None, "the tiny codec loads under the bundled config")
    except Exception as exc:  # noqa: BLE001 (a refusal is the result, recorded with its message)
        check.add("as_released", "fixed_codec_config",
                  f"{type(exc).__name__}: {' '.join(str(exc).split())[:240]} (the wheel's config: encoder width 64, "
                  f"decoder width 1024, HuBERT base; the checkpoint's audio_tokenizer_config: encoder width "
                  f"{own_config['acoustic_model_config']['encoder_hidden_size']}, decoder width "
                  f"{own_config['acoustic_model_config']['decoder_hidden_size']})")
    own = work / "tiny_audio_tokenizer_config.json"
    own.write_text(json.dumps({**own_config, "model_type": "higgs_audio_v2_tokenizer"}))
    codec_module._BUNDLED_CODEC_CONFIG_PATH = str(own)
    try:
        for dtype, suffix in ((torch.float32, ""), (torch.bfloat16, "/bfloat16")):
            codec = codec_module.HiggsAudioCodec.from_pretrained(str(folder), device="cpu", dtype=dtype)
            for case in codec_cases.cases():
                frames = golden_codec.expected_frames(case)
                pcm = codec.decode(torch.from_numpy(np.ascontiguousarray(frames.T))).to(torch.float32).numpy()
                difference, detail = codec_cases.judge(case, pcm)
                if difference is not None and suffix:
                    difference = "bfloat16_decode"
                check.add(case["id"] + suffix, difference, detail)
    finally:
        codec_module._BUNDLED_CODEC_CONFIG_PATH = released
    return check


# --- our 4b dummy through its loaders (recorded, not judged) ----------------------------------------------------

def loads_4b_dummy(mods: dict[str, types.ModuleType], work: Path) -> dict[str, Any]:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from higgs_dummy.checkpoint import checkpoint_config, talker_state_dict
    from higgs_dummy.codec_weights import codec_config, codec_state_dict
    from higgs_dummy.encoder_weights import encoder_state_dict
    from higgs_dummy.tokenizer import write_tokenizer
    from reference.talker import prompts
    from reference.talker.special_tokens import load_tokenizer, special_ids

    out: dict[str, Any] = {}
    config = checkpoint_config("4b")
    hf = mods["hf_config"].HiggsMultimodalQwen3Config(**json.loads(json.dumps(config)))
    text = hf.get_text_config()
    out["config"] = (f"HiggsMultimodalQwen3Config takes config.json: text_config {type(text).__name__}, "
                     f"{text.num_hidden_layers} layers, hidden {text.hidden_size}, vocab {text.vocab_size}, rope_theta "
                     f"{getattr(text, 'rope_theta', None) or text.rope_parameters.get('rope_theta')}; "
                     f"audio_encoder_config {hf.audio_encoder_config}")

    folder = work / "4b-parts"
    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer(folder, "4b", model_max_length=40960)
    adapter = mods["text_tokenizer"].HiggsTokenizerAdapter(
        PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(folder / "tokenizer.json"))))
    ours_tok = load_tokenizer(folder)
    text_in = "The quick brown fox jumps over the lazy dog."
    theirs_ids = adapter.build_prompt(text_in)
    ours_ids = list(prompts.zero_shot(ours_tok, special_ids(ours_tok), text_in).token_ids)
    out["tokenizer"] = (f"HiggsTokenizerAdapter takes tokenizer.json (<|tts|> {adapter.tts_id}, <|ref_audio|> "
                        f"{adapter.ref_audio_id}, <|text|> {adapter.text_id}, <|audio|> {adapter.audio_id}, "
                        f"<|ref_text|> {adapter.ref_text_id}); zero-shot prompt of {text_in!r}: "
                        f"{'equal to ours' if theirs_ids == ours_ids else f'theirs {theirs_ids}, ours {ours_ids}'} "
                        f"({len(theirs_ids)} ids)")

    mapper = mods["weight_loader"].DiscreteWeightMapper(text_prefix_map=mods["model"]._BACKBONE_PREFIX_MAP,
                                                        tie_modality=True)
    names = list(talker_state_dict("tiny", 0)) + [CODEC_PREFIX + k for k in codec_state_dict(codec_config("tiny"), 0)]
    mapped = {n: mapper.map(n) for n in names}
    kinds = {"backbone": sorted({m.split(".layers.")[0] + (".layers.N" if ".layers." in m else "") for m in
                                 mapped.values() if m and m.startswith("backbone.")}),
             "own": sorted({m for m in mapped.values() if m and not m.startswith("backbone.") and
                            m.startswith(("multimodal_embedding.", "modality_head."))}),
             "skipped (codec)": sum(m is None for m in mapped.values()),
             "left as is (dropped: tied)": sorted({m for m in mapped.values() if m and m.startswith("tied.")})}
    out["weight_names"] = (f"DiscreteWeightMapper on the checkpoint's names (the same at every size): {kinds}; the "
                           f"backbone's go to sglang's Qwen3ForCausalLM.load_weights (not run here)")

    codec_folder = _write_codec_checkpoint(work / "4b-codec", {**codec_state_dict(codec_config("4b"), 0),
                                                               **encoder_state_dict("4b", 0)})
    try:
        codec = mods["audio_codec"].HiggsAudioCodec.from_pretrained(str(codec_folder), device="cpu")
        from safetensors import safe_open

        with safe_open(str(codec_folder / "model.safetensors"), framework="pt") as f:
            given = {k[len(CODEC_PREFIX):] for k in f.keys()}
        expected = set(codec.model.state_dict())
        missing, unexpected = sorted(expected - given), sorted(given - expected)
        frames = torch.randint(0, 1024, (25, NUM_CODEBOOKS), generator=torch.Generator().manual_seed(0))
        pcm = codec.decode(frames)
        out["codec"] = (f"HiggsAudioCodec.from_pretrained (bundled config) takes the 4b codec and encoder tensors: "
                        f"{len(given)} given, {len(missing)} of its {len(expected)} missing {missing[:6]}, "
                        f"{len(unexpected)} unexpected {unexpected[:6]}; 25 random frames decode to {pcm.numel()} "
                        f"samples, RMS {float(pcm.float().pow(2).mean().sqrt()):.3f}")
    except Exception as exc:  # noqa: BLE001 (recorded: what its loader says of our 4b dummy)
        out["codec"] = f"HiggsAudioCodec.from_pretrained refuses the 4b codec: {type(exc).__name__}: {exc}"
    return out


def main() -> int:
    torch.set_num_threads(1)
    package = upstream_package()
    mods = _install_stand_ins(package)
    higgs = package / "models" / "higgs_tts"
    for name in ("proto", "scheduling", "scheduling.pipeline_state", "scheduling.streaming_vocoder",
                 "utils.audio_payload"):
        module = _StandIns(f"sglang_omni.{name}")
        module.__path__ = []  # type: ignore[attr-defined]
        sys.modules[f"sglang_omni.{name}"] = module

    class StreamingVocoderBase:  # the generic base of the vocoder scheduler; its queueing does not run here
        def __class_getitem__(cls, item):
            return cls

    class DeclarativeStateBase:  # the payload state's base (its wire encoding does not run here)
        pass

    def wire(default=dataclasses.MISSING, *, default_factory=dataclasses.MISSING, **_):
        return dataclasses.field(default=default, default_factory=default_factory)

    streaming, state = (sys.modules[f"sglang_omni.scheduling.{n}"] for n in ("streaming_vocoder", "pipeline_state"))
    streaming.StreamingVocoderBase = StreamingVocoderBase  # type: ignore[attr-defined]
    state.DeclarativeStateBase, state.wire = DeclarativeStateBase, wire  # type: ignore[attr-defined]
    load_module_file("sglang_omni.models.higgs_tts.payload_types", higgs / "payload_types.py")
    vocoder = load_module_file("sglang_omni.models.higgs_tts.vocoder_scheduler", higgs / "vocoder_scheduler.py")
    with tempfile.TemporaryDirectory(prefix="diff-sglang-omni-") as tmp:
        work = Path(tmp)
        checks = [delay_check(mods), state_machine_check(mods), Check("talker_streams", cannot_run=NO_ENGINE),
                  codec_check(mods["audio_codec"], work), Check("encoder_codes", cannot_run=ENCODER_IS_TRANSFORMERS),
                  vocoder_tail_check(mods, vocoder)]
        ran = {"loads_4b_dummy": loads_4b_dummy(mods, work)}
    versions = {name: version(name) for name in ("sglang-omni", "torch", "transformers")}
    for key, value in ran["loads_4b_dummy"].items():
        print(f"4b dummy, {key}: {value}")
    print(json.dumps({"written": str(write_results("sglang-omni", versions, checks, ran=ran))}))
    from conformance.differential.report import print_and_exit_status

    return print_and_exit_status("sglang-omni")


if __name__ == "__main__":
    sys.exit(main())
