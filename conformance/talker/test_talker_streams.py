"""Greedy code streams of the talker on a real vLLM engine equal the oracle's goldens, token for
token: one request, concurrent requests of mixed lengths, voice clone, a prompt longer than the
prefill chunk, and preemption (tiny KV cache) that must not change the codes. Every runner
variant must also produce exactly the same streams as the others that ran (V1 = V2), checked
first, so that a stream off the goldens still shows whether the runners agree.

Runner variants: V1 everywhere; V2 eager and V2 with CUDA graphs on a GPU (on a CPU they skip:
the platform matrix pins V1 there). On a GPU the engines use float32 FLEX_ATTENTION
(conformance/engines.py says why).
"""

import json
import os

import pytest

from conformance.talker import talker_cases
from conformance.engines import preemptions, runner_params
from higgs_dummy.cache import cached_checkpoint
from reference.cuda_graphs import batch_buckets

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine]

PROMPTS = talker_cases.load_prompts()
RUNS = talker_cases.load_engine_runs()
GOLDENS = talker_cases.load_goldens()
PROMPT_BY_ID = {p["id"]: p for p in PROMPTS["prompts"]}
# Runner variant -> engine arguments it adds. v2-graphs: decode steps replay FULL CUDA graphs
# (batches of 1, 2 or 4 requests, padded up: padded rows must be harmless) and prefill chunks of
# up to 64 tokens replay piecewise graphs around the attention.
GRAPHS = {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32, 64]}
VARIANTS = {
    "v1": {"enforce_eager": True},
    "v2-eager": {"enforce_eager": True},
    "v2-graphs": {"enforce_eager": False, "compilation_config": GRAPHS},
}


@pytest.fixture(scope="session")
def streams_dir(tmp_path_factory):
    """Where each (run, variant) leaves its streams for the V1 = V2 comparison; one folder per
    session, shared by the pytest-xdist workers (the variants may run in different workers)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "talker-streams"
    folder.mkdir(exist_ok=True)
    return folder


def check_same_as_other_variants(streams_dir, run_id: str, variant: str, streams: list) -> None:
    """Records this variant's streams, then compares them with every other variant's recorded so
    far. Each side records before it compares, so of any two variants the later one compares."""
    (streams_dir / f"{run_id}.{variant}.json").write_text(json.dumps(streams))
    for other in sorted(streams_dir.glob(f"{run_id}.*.json")):
        other_variant = other.name.removeprefix(f"{run_id}.").removesuffix(".json")
        if other_variant != variant:
            assert json.loads(other.read_text()) == streams, f"{run_id}: {variant} and {other_variant} differ (V1 = V2 broken)"


# Decoded end to end: a greedy request's audio equals the oracle's audio (oracle rows through the
# numpy codec oracle) within the codec goldens' tolerance. Before the stream runs, whose first
# engine (base, greedy checkpoint) it shares: one boot fewer per variant.
E2E_PROMPTS = ["hello", "clone_with_text"]


@pytest.mark.cpu
@pytest.mark.parametrize("variant", runner_params(VARIANTS))
def test_decoded_audio_equals_the_oracle_audio(variant, pool):
    import numpy as np
    import torch

    from conformance import case_files
    from conformance.oracles import codec_numpy
    from reference.codec.model import load_codec, read_codec_tensors
    from reference.codec.delay_pattern import rows_to_frames

    engine = RUNS["engines"]["base"]
    api = pool.get(variant.split("-")[0], {**engine["args"], **VARIANTS[variant]})
    codec = load_codec(api.checkpoint)
    state = {k: v.numpy() for k, v in read_codec_tensors(api.checkpoint).items()}
    tolerance = min(float(c["tolerance"]["max_abs"]) for c in case_files.load("codec/decode")["cases"])
    requests = [talker_cases.speech_request(PROMPT_BY_ID[p], PROMPTS["max_tokens"]) for p in E2E_PROMPTS]
    for pid, result in zip(E2E_PROMPTS, api.generate(requests)):
        audio = codec.decode(result.frames).numpy()
        oracle_frames = rows_to_frames(np.asarray(GOLDENS["streams"][pid]["rows"]))
        oracle_audio = codec_numpy.decode(oracle_frames, state)
        assert audio.shape == oracle_audio.shape, pid
        assert float(np.abs(audio - oracle_audio).max()) <= tolerance, pid


# Variant outermost, so that one variant's engines serve all runs before the next boots.
@pytest.mark.cpu
@pytest.mark.parametrize("run", RUNS["runs"], ids=lambda r: r["id"])
@pytest.mark.parametrize("variant", runner_params(VARIANTS))
def test_greedy_streams_equal_oracle_goldens(run, variant, pool, streams_dir):
    engine, flavour = RUNS["engines"][run["engine"]], run.get("flavour", "greedy")
    checkpoint = cached_checkpoint(PROMPTS["checkpoint"]["size"], PROMPTS["checkpoint"]["seed"], flavour)
    api = pool.get(variant.split("-")[0], {**engine["args"], **VARIANTS[variant]}, checkpoint=checkpoint)
    before = preemptions(api)
    batches = [
        (batch, api.generate([talker_cases.speech_request(PROMPT_BY_ID[p], PROMPTS["max_tokens"]) for p in batch]))
        for batch in run["batches"]
    ]
    check_same_as_other_variants(streams_dir, run["id"], variant, [r.rows for _, results in batches for r in results])
    for batch, results in batches:
        for pid, result in zip(batch, results):
            golden = talker_cases.golden_stream(GOLDENS, pid, flavour)
            assert len(result.rows) == len(golden["rows"]), f"{pid}: row count"
            for i, (got, want) in enumerate(zip(result.rows, golden["rows"])):
                assert got == want, f"{pid}: first difference at audio row {i}"
            assert result.lm_tokens == golden["lm_tokens"], f"{pid}: LM tokens"
            assert result.finish_reason == ("stop" if golden["finished"] else "length")
    if engine.get("expect_preemption"):
        assert preemptions(api) > before, "the tiny KV cache did not force a preemption: the case tests nothing"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", runner_params({"v2-graphs": {}}))
def test_the_graphs_variant_captured_full_decode_graphs(variant, pool):
    """The v2-graphs streams above came from FULL CUDA graph replays: vLLM captured them (it
    silently downgrades to piecewise when the attention backend cannot run full graphs)."""
    api = pool.get("v2", {**RUNS["engines"]["base"]["args"], **VARIANTS[variant]})
    sizes = api.engine.collective_rpc("talker_full_cuda_graphs")[0]
    assert {1, 2, 4} <= set(sizes), f"FULL graphs captured for {sizes} tokens, expected decode batches 1, 2, 4"


@pytest.mark.gpu
@pytest.mark.parametrize("variant", runner_params({"v2-graphs": {}, "v2-eager": {}}))
def test_the_sampling_step_replays_graphs_unless_the_engine_is_eager(variant, pool):
    """Every row of the v2-graphs streams above was drawn by a replay of the sampling step's CUDA
    graphs (reference/talker/step_graphs.py), and they equal the goldens as the eager step's do."""
    args = {**RUNS["engines"]["base"]["args"], **VARIANTS[variant]}
    api = pool.get("v2", args)
    before = api.engine.collective_rpc("talker_sampler_graphs")[0]
    result = api.generate([talker_cases.speech_request(PROMPT_BY_ID["hello"], 24)])[0]
    graphs = api.engine.collective_rpc("talker_sampler_graphs")[0]
    if variant == "v2-eager":
        assert before is None and graphs is None
        return
    assert graphs["buckets"] == batch_buckets(args["max_num_seqs"])
    assert graphs["replays"] - before["replays"] >= len(result.rows), "a decode step drew its codes eagerly"


@pytest.mark.cpu
@pytest.mark.parametrize("variant", runner_params({"v1": {}, "v2": {}}))
def test_dummy_load_format_boots_and_streams_codes(variant, pool):
    """`load_format="dummy"` never calls load_weights; the talker must still boot and stream."""
    api = pool.get(variant, {**RUNS["engines"]["base"]["args"], "load_format": "dummy", "enforce_eager": True})
    result = api.generate([talker_cases.speech_request(PROMPT_BY_ID["hello"], 24)])[0]
    assert len(result.lm_tokens) >= 1 and all(len(row) == 8 for row in result.rows)
    assert all(0 <= code <= 1025 for row in result.rows for code in row)
