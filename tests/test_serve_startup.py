"""The server reads back what vLLM built before it serves: a build other than the resolved
profile fails its start naming the key, and the engine is shut down after a failed start too.
After the read-back the code2wav stage is warmed; a failed read-back warms nothing."""

import asyncio
import inspect
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient

from reference import compat
from reference.deploy.readback import BuildMismatch, check_build, expected_build
from reference.deploy.resolve import resolve_deployment
from reference.serve.__main__ import check_engine_build, start
from reference.serve.app import build_app
from reference.serve.metrics import ServeMetrics
from reference.talker.engine import built_settings as engine_built_settings
from tests.test_serve_app import EXACT, FakeService, FakeSpeaker


class ReportingEngine:
    """An AsyncLLM stand-in whose workers report `built` (one dict per worker)."""

    def __init__(self, built):
        self.built, self.asked = built, []

    async def collective_rpc(self, method):
        self.asked.append(method)
        return self.built


def as_profile_asks(deployment) -> dict:
    return {key: want.value for key, want in expected_build(deployment).items()}


def test_a_build_as_the_profile_asks_passes():
    deployment = resolve_deployment("default", "cpu")
    engine = ReportingEngine([as_profile_asks(deployment)])
    asyncio.run(check_engine_build(engine, deployment))
    assert engine.asked == ["talker_built_settings"]


def test_a_build_other_than_the_profile_fails_naming_the_key_and_both_values():
    deployment = resolve_deployment("default", "cpu")
    built = {**as_profile_asks(deployment), "max_num_seqs": 3}
    with pytest.raises(BuildMismatch, match=r"max_num_seqs: vLLM built 3, the profile resolved \d+"):
        asyncio.run(check_engine_build(ReportingEngine([built]), deployment))


class WarmingStage:
    decodes = "windows"

    def __init__(self):
        self.warmed = 0

    def warm(self):
        self.warmed += 1
        return [18, 43, 45]


def test_the_start_reads_back_the_build_then_warms_the_stage():
    deployment, stage = resolve_deployment("default", "cpu"), WarmingStage()
    asyncio.run(start(ReportingEngine([as_profile_asks(deployment)]), deployment, stage))
    assert stage.warmed == 1
    built = {**as_profile_asks(deployment), "max_num_seqs": 3}
    with pytest.raises(BuildMismatch):
        asyncio.run(start(ReportingEngine([built]), deployment, stage))
    assert stage.warmed == 1, "a refused build warms nothing"


def service():
    return FakeService(speaker=FakeSpeaker(ServeMetrics()), model_name="m", runner="v1", profile="default",
                       max_model_len=1024, default_sampling={}, voices={"default": None}, stream_default=EXACT)


def test_a_failed_start_check_stops_the_server_and_shuts_the_engine_down():
    shut = []

    async def refuse():
        raise BuildMismatch("default on cpu: max_num_seqs: vLLM built 3, the profile resolved 8")

    app = build_app(service(), on_startup=refuse, on_shutdown=lambda: shut.append(True))
    with pytest.raises(BuildMismatch, match="max_num_seqs"):
        with TestClient(app):
            pass
    assert shut == [True]


def test_a_passed_start_check_serves():
    started = []

    async def accept():
        started.append(True)

    with TestClient(build_app(service(), on_startup=accept)) as c:
        assert started == [True] and c.get("/health").json()["status"] == "ok"


# What the front end holds and what a worker built can differ (a worker's vLLM resolves its own copy of
# the config: the platform's and the runner's adjustments, the graphs it captured, the backend its
# layers run). The read-back must be the workers'.

def engine_config(asks: dict, **changed):
    """A VllmConfig's shape (the paths reference/compat.py built_settings reads) holding `asks`, with
    `changed` (scheduler or cache fields) as a worker's own resolution left them."""
    scheduler = SimpleNamespace(max_num_seqs=asks["max_num_seqs"], max_num_batched_tokens=2048, stream_interval=1,
                                async_scheduling=asks["async_scheduling"], enable_chunked_prefill=True)
    cache = SimpleNamespace(enable_prefix_caching=asks["enable_prefix_caching"], block_size=128, cache_dtype="auto")
    for name, value in changed.items():
        setattr(scheduler if hasattr(scheduler, name) else cache, name, value)
    return SimpleNamespace(
        compilation_config=SimpleNamespace(mode=asks["compilation_mode"], cudagraph_mode=asks["cudagraph_mode"],
                                           cudagraph_capture_sizes=asks["cudagraph_capture_sizes"]),
        scheduler_config=scheduler, cache_config=cache,
        model_config=SimpleNamespace(max_model_len=asks["max_model_len"], enforce_eager=asks["enforce_eager"],
                                     seed=asks["seed"], dtype=f"torch.{asks['dtype']}"),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, data_parallel_size=1),
        attention_config=SimpleNamespace(backend=asks["attention_backend"]))


class Worker:
    """A worker's read-back as TalkerWorker.talker_built_settings does it: compat.built_settings on
    the worker's own config and runner (a V1 runner whose layers run CPU_ATTN)."""

    def __init__(self, vllm_config):
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        self.vllm_config = vllm_config
        self.model_runner = SimpleNamespace(attn_groups=[[SimpleNamespace(backend=CPUAttentionBackend)]])

    def talker_built_settings(self):
        return compat.built_settings(self.vllm_config, self.model_runner)


class FrontEnd(ReportingEngine):
    """An AsyncLLM stand-in: its own `vllm_config`, and workers that answer collective_rpc themselves."""

    def __init__(self, vllm_config, workers):
        super().__init__(None)
        self.vllm_config, self.workers = vllm_config, workers

    async def collective_rpc(self, method):
        self.asked.append(method)
        return [getattr(worker, method)() for worker in self.workers]


def test_the_read_back_is_what_the_workers_built_not_the_front_ends_config():
    from reference.talker.worker import TalkerWorker

    assert "compat.built_settings(self.vllm_config, self.model_runner)" in inspect.getsource(
        TalkerWorker.talker_built_settings), "Worker above must read back as the real worker does"
    deployment = resolve_deployment("default", "cpu")
    asks = as_profile_asks(deployment)
    # The front end holds what the profile asks; the worker built 4 sequences and no prefix caching.
    front = FrontEnd(engine_config(asks), [Worker(engine_config(asks, max_num_seqs=4, enable_prefix_caching=False))])
    with pytest.raises(BuildMismatch) as error:
        asyncio.run(check_engine_build(front, deployment))
    assert [line.split(": ")[1] for line in str(error.value).splitlines()] == ["max_num_seqs", "enable_prefix_caching"]
    assert "max_num_seqs: vLLM built 4, the profile resolved 16" in str(error.value)
    # And the other way round: a front end whose config differs, workers that built what the profile asks.
    front = FrontEnd(engine_config(asks, max_num_seqs=4), [Worker(engine_config(asks))] * 2)
    asyncio.run(check_engine_build(front, deployment))
    assert front.asked == ["talker_built_settings"]


def test_the_offline_read_back_asks_the_workers_too():
    """reference/talker/engine.py built_settings (the engine-boot checks' read-back) on a vllm.LLM stand-in."""
    deployment = resolve_deployment("default", "cpu")
    asks = as_profile_asks(deployment)
    worker = Worker(engine_config(asks, max_num_seqs=4))
    llm = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=engine_config(asks)),
                          collective_rpc=lambda method: [getattr(worker, method)()])
    built = engine_built_settings(llm)
    assert [b["max_num_seqs"] for b in built] == [4]
    with pytest.raises(BuildMismatch, match="max_num_seqs: vLLM built 4, the profile resolved 16"):
        check_build(deployment, built)


def test_a_default_max_tokens_past_the_model_length_fails_the_start_naming_both_keys(monkeypatch, capsys):
    """Every request without its own max_tokens would be a 400: the server refuses to start (exit 2),
    naming the profile's keys, and shuts the engine it booted down. The engine and codec are stand-ins."""
    import reference.codec.model as codec_model
    import reference.talker.engine as talker_engine
    from reference.serve.__main__ import main

    engines = []

    def fake_engine(model, runner, **kwargs):
        engines.append(SimpleNamespace(model_config=SimpleNamespace(max_model_len=1024), shut=False))
        engines[-1].shutdown = lambda: setattr(engines[-1], "shut", True)
        return engines[-1]

    monkeypatch.setattr(talker_engine, "start_async_llm", fake_engine)
    monkeypatch.setattr(codec_model, "load_codec", lambda *a, **k: pytest.fail("the check comes before the codec"))
    code = main(["--model", "unused", "--profile", "default", "--platform", "cpu",
                 "--set", "stages.0.max_model_len=1024", "--set", "stages.0.default_sampling_params.max_tokens=1024"])
    err = capsys.readouterr().err
    assert code == 2 and engines and engines[0].shut, err
    assert "stages.0.default_sampling_params.max_tokens 1024" in err and "stages.0.max_model_len 1024" in err, err


def test_a_body_limit_below_one_byte_is_refused_naming_the_flag(capsys):
    from reference.serve.__main__ import parse_args

    with pytest.raises(SystemExit) as info:
        parse_args(["--model", "m", "--max-body-bytes", "0"])
    assert info.value.code == 2 and "--max-body-bytes: must be a positive number of bytes" in capsys.readouterr().err
