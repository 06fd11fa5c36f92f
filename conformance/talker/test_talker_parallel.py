"""The talker under vLLM's own parallelism (conformance/cases/talker/parallel.yaml).

Tensor parallel 2: every rank holds half of each table and head; the heads gather their shards'
logits (reference/talker/model.py), every rank samples the same codes, and the streams equal the
single-device goldens token for token. Data parallel 2: two engine replicas behind one AsyncLLM;
the streams spread over both and still equal their goldens. In both, closing streams early leaves
no talker state on any worker of any engine.

Where they run: on the two-GPU machine under V1, V2 eager and V2 CUDA graphs; on a CPU with two
cores under V1 (each rank's threads bound to its own core). With fewer devices they skip, saying
what they need. On CUDA the NVLink-multicast switches of .ci/gpu must be set (the machine's rule).
"""

import asyncio
import os
import uuid

import pytest

from conformance import case_files
from conformance.talker import talker_cases
from conformance.engines import platform_engine_args, runner_params
from conformance.environment import has_cuda
from higgs_dummy.cache import cached_checkpoint
from reference import compat
from reference.speech import SpeechAPI
from reference.talker.engine import start_async_llm

pytestmark = [pytest.mark.dummy_weights, pytest.mark.slow, pytest.mark.engine, pytest.mark.cpu]

CASES = case_files.load("talker/parallel")
PROMPTS = {p["id"]: p for p in talker_cases.load_prompts()["prompts"]}
MAX_TOKENS = talker_cases.load_prompts()["max_tokens"]
GOLDENS = talker_cases.load_goldens()
GRAPHS = {"cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 2, 4]}
VARIANTS = {
    "v1": {"enforce_eager": True},
    "v2-eager": {"enforce_eager": True},
    "v2-graphs": {"enforce_eager": False, "compilation_config": GRAPHS},
}
PLATFORM = "cuda" if has_cuda() else "cpu"


def devices_here() -> int:
    if has_cuda():
        import torch

        return torch.cuda.device_count()
    return len(os.sched_getaffinity(0))


def layout_params() -> list:
    params = []
    for layout, spec in CASES["layouts"].items():
        for variant in runner_params({name: VARIANTS[name] for name in spec["variants"]}):
            (name,) = variant.values
            marks = list(variant.marks)
            if devices_here() < spec["world"]:
                unit = "GPUs (the two-GPU machine: device kind nvidia-h200-x2)" if has_cuda() else "CPU cores"
                marks.append(pytest.mark.skip(reason=f"{layout} needs {spec['world']} {unit}; this machine has {devices_here()}"))
            params.append(pytest.param((layout, name), id=f"{layout}-{name}", marks=marks))
    return params


def cpu_binding(world: int) -> dict:
    """On a CPU each rank's OpenMP threads get a core of their own ("0|1"); vLLM's automatic
    binding wants a NUMA node per rank."""
    if has_cuda():
        return {}
    cores = sorted(os.sched_getaffinity(0))[:world]
    return {"VLLM_CPU_OMP_THREADS_BIND": "|".join(map(str, cores))}


class ParallelEngines:
    """The AsyncLLM engines of one layout and runner variant, one per checkpoint flavour, all
    driven from one event loop; on a CPU one engine lives at a time."""

    def __init__(self, layout: str, variant: str):
        self.layout, self.variant = layout, variant
        self.runner = variant.split("-")[0]
        self.loop = asyncio.new_event_loop()
        self.apis: dict[str, SpeechAPI] = {}

    def get(self, flavour: str = "greedy") -> SpeechAPI:
        if flavour not in self.apis:
            if not has_cuda():
                self.close_engines()
            spec = CASES["layouts"][self.layout]
            checkpoint = cached_checkpoint("tiny", 0, flavour)
            variant = VARIANTS[self.variant]
            args = {**platform_engine_args(), **CASES["engine"]["args"], **spec["args"], **variant}
            args["compilation_config"] = {**spec["args"].get("compilation_config", {}), **variant.get("compilation_config", {})}
            with pytest.MonkeyPatch.context() as env:
                for key, value in cpu_binding(spec["world"]).items():
                    env.setenv(key, value)
                engine = start_async_llm(checkpoint, self.runner, dtype="float32", disable_log_stats=False, **args)
            self.apis[flavour] = SpeechAPI(engine, checkpoint, self.runner)
        return self.apis[flavour]

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def close_engines(self) -> None:
        for api in self.apis.values():
            api.engine.shutdown()
        self.apis.clear()
        self.loop.run_until_complete(asyncio.sleep(0.1))  # the output tasks see their cancellation


@pytest.fixture(scope="module", params=layout_params())
def engines(request):
    layout, variant = request.param
    engines = ParallelEngines(layout, variant)
    yield engines
    engines.close_engines()
    engines.loop.close()


def request_for(prompt_id: str):
    return talker_cases.speech_request(PROMPTS[prompt_id], MAX_TOKENS)


async def stream(api: SpeechAPI, prompt_id: str) -> list[list[int]]:
    return [row async for rows in api.stream_rows(request_for(prompt_id), uuid.uuid4().hex) for row in rows]


def finished_per_engine() -> dict[str, float]:
    """Requests each data-parallel engine finished so far (vLLM's own counter, by engine index)."""
    from prometheus_client import REGISTRY

    counts: dict[str, float] = {}
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == "vllm:request_success_total":
                counts[sample.labels["engine"]] = counts.get(sample.labels["engine"], 0.0) + sample.value
    return counts


def test_every_worker_runs_the_runner_asked_for(engines):
    api = engines.get()
    kinds = engines.run(compat.worker_rpc_every_engine(api.engine, "talker_runner_kind"))
    spec = CASES["layouts"][engines.layout]
    ranks = spec["args"].get("tensor_parallel_size", 1)
    replicas = spec["args"].get("data_parallel_size", 1)
    assert [len(workers) for workers in kinds] == [ranks] * replicas, f"workers per engine: {kinds}"
    assert {kind for workers in kinds for kind in workers} == {engines.runner}, kinds


@pytest.mark.parametrize("run", CASES["runs"], ids=lambda r: r["id"])
def test_streams_equal_the_single_device_goldens(engines, run):
    if engines.layout not in run.get("layouts", [engines.layout]):
        pytest.skip(f"{run['id']} runs under {run['layouts']} alone")
    if PLATFORM not in run.get("platforms", [PLATFORM]):
        pytest.skip(f"{run['id']} runs on {run['platforms']} (an engine boot per flavour is too slow here)")
    flavour = run.get("flavour", "greedy")
    api = engines.get(flavour)
    before = finished_per_engine()

    async def all_streams():
        return await asyncio.gather(*(stream(api, pid) for pid in run["batch"]))

    for pid, rows in zip(run["batch"], engines.run(all_streams())):
        golden = talker_cases.golden_stream(GOLDENS, pid, flavour)["rows"]
        assert len(rows) == len(golden), f"{pid}: {len(rows)} rows, golden {len(golden)}"
        for i, (got, want) in enumerate(zip(rows, golden)):
            assert got == want, f"{pid}: first difference at audio row {i} under {engines.layout}"
    if CASES["layouts"][engines.layout].get("expect_spread"):
        after = finished_per_engine()
        served = {engine: after[engine] - before.get(engine, 0.0) for engine in after}
        assert sum(1 for n in served.values() if n > 0) >= 2, f"requests finished per engine: {served}"


def test_closing_streams_frees_the_talker_state_on_every_worker(engines):
    api, case = engines.get(), CASES["aborts"]

    async def closed_early(pid: str) -> None:
        rows = api.stream_rows(request_for(pid), uuid.uuid4().hex)
        await anext(rows)
        await rows.aclose()

    async def run():
        results = await asyncio.gather(stream(api, case["survivor"]), *(closed_early(p) for p in case["closed"]))
        for _ in range(50):  # a worker drops a request's state at the engine's next step
            open_requests = await compat.worker_rpc_every_engine(api.engine, "talker_open_requests")
            if not any(n for workers in open_requests for n in workers):
                break
            await asyncio.sleep(0.1)
        return results[0], open_requests

    survivor, open_requests = engines.run(run())
    assert survivor == talker_cases.golden_stream(GOLDENS, case["survivor"])["rows"]
    assert not any(n for workers in open_requests for n in workers), f"talker state left per engine/rank: {open_requests}"
    assert not api.engine.output_processor.has_unfinished_requests()
