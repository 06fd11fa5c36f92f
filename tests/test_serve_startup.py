"""The server reads back what vLLM built before it serves: a build other than the resolved
profile fails its start naming the key, and the engine is shut down after a failed start too.
After the read-back the code2wav stage is warmed; a failed read-back warms nothing."""

import asyncio

import pytest
from fastapi.testclient import TestClient

from reference.deploy.readback import BuildMismatch, expected_build
from reference.deploy.resolve import resolve_deployment
from reference.serve.__main__ import check_engine_build, start
from reference.serve.app import build_app
from reference.serve.metrics import ServeMetrics
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
