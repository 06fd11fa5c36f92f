"""The streaming speech API over AsyncLLM: long inputs, chunk geometry, abort.

A stream's chunks must stitch into the offline decode of the same codes (within the case's
bound), its codes must equal the oracle's goldens, and closing a stream must abort its request:
the other streams finish unchanged and no worker keeps talker state for it. The chunks come from
the code2wav stage the default profile resolves for this platform (reference/codec/stage.py).
"""

import asyncio

import pytest
import torch

from conformance import case_files, figures
from conformance.talker import talker_cases
from conformance.engines import platform_engine_args, runner_params
from conformance.environment import has_cuda
from higgs_dummy.cache import cached_checkpoint
from reference.codec.model import load_codec
from reference.codec.stage import CodecStage
from reference.deploy.resolve import resolve_deployment
from reference.codec.delay_pattern import rows_to_frames
from reference.talker.engine import start_async_llm
from reference.speech import SpeechAPI
from reference.codec.geometry import StreamGeometry
from reference.codec.streaming import agreement

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu,
              pytest.mark.reference_only(reason="drives our SpeechAPI over AsyncLLM in process, not a server over "
                                                "HTTP, and compares with the tiny checkpoint's goldens")]

CASES = case_files.load("speech/streaming")
PROMPTS = {p["id"]: p for p in talker_cases.load_prompts()["prompts"]}
MAX_TOKENS = talker_cases.load_prompts()["max_tokens"]
GOLDENS = talker_cases.load_goldens()["streams"]


@pytest.fixture(scope="module", params=runner_params({"v1": {}, "v2": {}}))
def speech(request):
    checkpoint = cached_checkpoint("tiny", 0)
    loop = asyncio.new_event_loop()
    args = {**platform_engine_args(), **CASES["engine"]}
    engine = start_async_llm(checkpoint, request.param, dtype="float32", enforce_eager=True, **args)
    codec = load_codec(checkpoint)
    stage = CodecStage.from_deployment(resolve_deployment("default", "cuda" if has_cuda() else "cpu"), codec)
    yield loop, SpeechAPI(engine, checkpoint, request.param, stage=stage), codec
    engine.shutdown()
    loop.run_until_complete(asyncio.sleep(0.1))  # let the engine's output task see its cancellation
    loop.close()


def _request(prompt_id):
    return talker_cases.speech_request(PROMPTS[prompt_id], MAX_TOKENS)


@pytest.mark.parametrize("case", CASES["streams"], ids=lambda c: c["id"])
def test_streamed_chunks_stitch_into_the_offline_decode(case, speech, record_property):
    loop, api, codec = speech
    geometry = StreamGeometry(**case["geometry"])

    async def run():
        return [c async for c in api.stream_audio(_request(case["prompt"]), case["id"], geometry)]

    chunks = loop.run_until_complete(run())
    frames = rows_to_frames(torch.tensor(GOLDENS[case["prompt"]]["rows"]))
    offline = codec.decode(frames)
    assert [len(c) for c in chunks[:1]] == [geometry.first_chunk_frames * codec.hop_length]
    stream = torch.cat(chunks)
    assert stream.shape == offline.shape
    measured = agreement(stream, offline)
    print(f"{case['id']}: {len(chunks)} chunks, {measured}")
    # For the upgrade gate: bounded where the geometry stitches exactly, else measured (conformance/figures.py).
    bound_db = case["bound"]["min_snr_db"] if case["bound"] else None
    record_property("figure:snr_db", figures.snr_figure(measured.snr_db, bound_db=bound_db))
    if case["bound"]:
        assert measured.snr_db >= case["bound"]["min_snr_db"]
        assert measured.max_abs_err <= case["bound"]["max_abs_err"]


@pytest.mark.parametrize("case", CASES["concurrent"], ids=lambda c: c["id"])
def test_concurrent_streams_are_batched_and_each_stitches_into_its_offline_decode(case, speech):
    loop, api, codec = speech
    geometry = StreamGeometry(**case["geometry"])
    before = api.stage.record.batches.copy()

    async def one(i, prompt_id):
        return [c async for c in api.stream_audio(_request(prompt_id), f"{case['id']}-{i}", geometry)]

    async def run():
        return await asyncio.gather(*[one(i, p) for i, p in enumerate(case["prompts"])])

    streams = loop.run_until_complete(run())
    batches = api.stage.record.batches - before  # batch size -> decodes
    print(f"{case['id']}: codec batches {dict(batches)}")
    for prompt_id, chunks in zip(case["prompts"], streams):
        offline = codec.decode(rows_to_frames(torch.tensor(GOLDENS[prompt_id]["rows"])))
        measured = agreement(torch.cat(chunks), offline)
        assert measured.snr_db >= case["bound"]["min_snr_db"], f"{prompt_id}: {measured}"
        assert measured.max_abs_err <= case["bound"]["max_abs_err"], f"{prompt_id}: {measured}"
    assert max(batches) > 1, f"the stage never batched chunks of the {len(streams)} streams: {batches}"
    assert max(batches) <= api.stage.max_batch_size and api.stage.pending == 0


@pytest.mark.parametrize("case", CASES["aborts"], ids=lambda c: c["id"])
def test_closing_a_stream_aborts_it_and_spares_the_others(case, speech):
    loop, api, codec = speech
    geometry = StreamGeometry(first_chunk_frames=1, chunk_frames=25, left_context_frames=25, right_holdback_frames=4)

    async def aborted():
        stream = api.stream_audio(_request(case["aborted"]), f"{case['id']}-aborted", geometry)
        first = await anext(stream)
        await stream.aclose()
        return first

    async def survivor():
        return [rows async for rows in api.stream_rows(_request(case["survivor"]), f"{case['id']}-survivor")]

    async def run():
        return await asyncio.gather(aborted(), survivor())

    first_chunk, survivor_rows = loop.run_until_complete(run())
    assert len(first_chunk) == codec.hop_length
    assert [r for batch in survivor_rows for r in batch] == GOLDENS[case["survivor"]]["rows"]

    async def settle():
        # The worker drops a request's state when the engine core's next step tells it the
        # request ended (an empty step if nothing else runs), so poll for a few seconds.
        for _ in range(50):
            open_requests = await api.engine.collective_rpc("talker_open_requests")
            if open_requests == [0] and not api.engine.output_processor.has_unfinished_requests():
                break
            await asyncio.sleep(0.1)
        return open_requests

    assert loop.run_until_complete(settle()) == [0], "a worker still holds talker state after the abort"
    assert not api.engine.output_processor.has_unfinished_requests()
    assert api.stage.pending == 0, "the code2wav stage still holds windows of the aborted stream"
