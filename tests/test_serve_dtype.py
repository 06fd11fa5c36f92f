"""One dtype (issue #54): on a CPU the speech server's talker runs in float32, the dtype the suite's
engine checks run it in (conformance/engines.py), stated once: default.yaml's platforms.cpu, which
every shipped profile builds on. Under vLLM's dtype "auto" the float32 tiny checkpoint was served in
bfloat16 on a CPU that has it, and the boot log carried a warning per weight loaded into a bfloat16
parameter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conformance.serving.serving_client import MODEL_NAME, ServerProcess, pcm_of_wav, write_voices
from conformance.talker import talker_cases
from higgs_dummy.cache import cached_checkpoint
from reference.deploy.platform_matrix import RunnerUnavailable
from reference.deploy.resolve import PROFILES_DIR, resolve_deployment
from reference.talker.engine import RUNNER_ENV, deployment_engine_kwargs, engine_kwargs

pytestmark = pytest.mark.cpu

TEXT = next(p["text"] for p in talker_cases.load_prompts()["prompts"] if p["id"] == "fox")
GREEDY = {"temperature": 0.0, "max_tokens": 200}  # the tiny talker ends fox after 55 rows


def cpu_deployments() -> dict:
    """Every shipped profile that runs on a CPU, resolved there (the V2-only ones refuse the CPU)."""
    out = {}
    for path in sorted(PROFILES_DIR.glob("*.yaml")):
        try:
            out[path.stem] = resolve_deployment(path.stem, "cpu")
        except RunnerUnavailable:
            pass
    return out


def test_every_cpu_profile_resolves_the_talker_to_float32_from_default_yaml():
    deployments = cpu_deployments()
    assert {"default", "low_latency", "high_throughput"} <= set(deployments)
    for name, d in deployments.items():
        assert d.engine_kwargs["dtype"] == "float32", name
        assert d.origins["stages.0.dtype"] == "reference/deploy/profiles/default.yaml platforms.cpu", name
    assert "dtype" not in resolve_deployment("default", "cuda").engine_kwargs  # the checkpoint's own ("auto")


def test_vllm_takes_the_tiny_checkpoint_in_float32_from_the_resolved_cpu_profile(monkeypatch):
    from vllm.engine.arg_utils import EngineArgs

    monkeypatch.setenv(RUNNER_ENV, "0")  # restored after: the launcher's calls below set it
    d = resolve_deployment("default", "cpu")
    args = EngineArgs(**engine_kwargs(cached_checkpoint("tiny", 0), d.runner, **deployment_engine_kwargs(d)))
    assert args.create_model_config().dtype == torch.float32


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.dummy_weights
def test_the_served_answer_is_the_engine_checks_answer_and_nothing_is_downcast(tmp_path):
    """The default profile as shipped (no --set) against the suite's engine (EnginePool: float32, eager, in
    this process): one greedy request, the same PCM within one 16-bit step; the server's boot log names float32 and
    no conversion from float32 to bfloat16."""
    from conformance.engines import EnginePool
    from reference.codec.model import load_codec
    from reference.serve.wav import pcm16
    from reference.speech import SpeechRequest

    checkpoint = cached_checkpoint("tiny", 0)
    write_voices(tmp_path / "voices")
    server = ServerProcess(checkpoint, "default", "cpu", {}, tmp_path, tmp_path / "voices")
    try:
        server.wait_healthy()
        response = server.client.post("/v1/audio/speech", json={"model": MODEL_NAME, "input": TEXT, "voice": "default",
                                                                 "response_format": "wav", "stream": False, **GREEDY})
        assert response.status_code == 200, response.text
    finally:
        server.stop()
    served = pcm_of_wav(response.content, streamed=False)
    log = server.log_path.read_text(errors="replace").splitlines()
    downcast = [line for line in log if "float32" in line and "bfloat16" in line]
    assert not downcast, f"{len(downcast)} lines, the first: {downcast[0]}"
    assert any("dtype=torch.float32" in line for line in log), "vLLM's engine config line names no float32"

    pool = EnginePool()
    try:
        result = pool.get("v1", {}).generate([SpeechRequest(TEXT, sampling=GREEDY)])[0]
    finally:
        pool.close()
    assert result.finish_reason == "stop" and result.frames.shape[1] > 0, result.finish_reason
    checked = pcm16(load_codec(checkpoint).decode(result.frames))
    # The same codes decode to the same PCM but for float rounding: the server's codec and this
    # process's run on other thread counts, so a sample may land one 16-bit step away (seen in CI).
    # A talker in another dtype draws other codes: another length, samples far apart.
    assert len(served) == len(checked), f"served {len(served)} bytes, the engine check {len(checked)}"
    steps = np.abs(np.frombuffer(served, "<i2").astype(np.int32) - np.frombuffer(checked, "<i2"))
    assert steps.max() <= 1, f"{int((steps > 1).sum())} samples more than one step apart, the most {steps.max()}"
