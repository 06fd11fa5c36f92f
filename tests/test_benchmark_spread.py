"""The benchmark's figures from its rounds (benchmarks/spread.py), the engine's admission instants
(benchmarks/admission.py), and the table and PNG drawn from them (summary.py, plot.py), on made-up
streams: no engine."""

from __future__ import annotations

import asyncio
import statistics
from types import SimpleNamespace

import pytest

from benchmarks import summary
from benchmarks.admission import AdmissionTimes
from benchmarks.plot import plot
from benchmarks.spread import SPLIT, level_figures, round_figures, split_of, split_of_median

pytestmark = pytest.mark.cpu


def stream(start: float, *gaps: float, audio_s: float = 1.0, wall_s: float = 0.5) -> dict:
    """A stream whose five TTFA parts are `gaps` (seconds), as streams._one reports it."""
    instants = [start]
    for gap in gaps:
        instants.append(instants[-1] + gap)
    return {"ttfa_s": instants[-1] - start, "split_s": split_of(*instants), "audio_s": audio_s,
            "wall_s": wall_s, "rtf": wall_s / audio_s}


def test_the_five_parts_add_up_to_the_ttfa():
    parts = split_of(100.0, 100.004, 100.02, 100.05, 100.19, 100.23)
    assert list(parts) == list(SPLIT)
    assert parts["admission"] == pytest.approx(0.004) and parts["prefill"] == pytest.approx(0.016)
    assert parts["first_rows"] == pytest.approx(0.03) and parts["first_pcm"] == pytest.approx(0.04)
    assert sum(parts.values()) == pytest.approx(0.23)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_the_split_of_the_median_adds_up_to_the_median(count):
    streams = [stream(10.0 * i, 0.001 * (i + 1), 0.01, 0.05 + 0.01 * i, 0.2 - 0.02 * i, 0.03) for i in range(count)]
    split = split_of_median(streams, "ttfa_s", "split_s")
    assert sum(split.values()) == pytest.approx(statistics.median(s["ttfa_s"] for s in streams))


def test_the_split_of_the_median_is_the_middle_stream_or_the_mean_of_the_two():
    fast, middle, slow = stream(0, 0.001, 0.01, 0.01, 0.1, 0.01), stream(0, 0.002, 0.01, 0.05, 0.1, 0.02), stream(0, 0.5, 0.01, 0.2, 0.1, 0.01)
    assert split_of_median([slow, fast, middle], "ttfa_s", "split_s") == middle["split_s"]
    pair = split_of_median([slow, middle, fast, stream(0, 9, 0.01, 9, 9, 9)], "ttfa_s", "split_s")
    assert pair["admission"] == pytest.approx((0.002 + 0.5) / 2)


def test_a_round_reports_medians_over_its_streams_and_its_throughput():
    streams = [stream(0, 0.001, 0.01, 0.05, 0.1, 0.02, audio_s=2.0, wall_s=1.0),
               stream(0, 0.003, 0.01, 0.06, 0.1, 0.02, audio_s=2.0, wall_s=1.2),
               stream(0, 0.002, 0.01, 0.30, 0.1, 0.02, audio_s=2.0, wall_s=1.6)]
    figures = round_figures(streams, wall_s=1.6)
    assert figures["ttfa_ms_median"] == pytest.approx(193)
    assert figures["split_ms"] == pytest.approx({"admission": 3, "prefill": 10, "first_rows": 60, "first_window": 100,
                                                 "first_pcm": 20})
    assert figures["rtf_median"] == pytest.approx(0.6)
    assert figures["audio_s_per_s"] == pytest.approx(6.0 / 1.6)


def test_a_level_reports_the_median_of_its_rounds_and_their_range():
    rounds = [round_figures([stream(0, 0.002, 0.01, 0.05 + 0.01 * i, 0.1, 0.02, wall_s=0.4 + 0.1 * i)], wall_s=0.4 + 0.1 * i)
              for i in (2, 0, 1)]
    level = level_figures(rounds)
    assert level["ttfa_ms_median"] == pytest.approx(192)
    assert level["rtf_median"] == pytest.approx(0.5)
    assert level["audio_s_per_s"] == pytest.approx(2.0)
    assert sum(level["split_ms"].values()) == pytest.approx(level["ttfa_ms_median"])
    spread = level["spread"]
    assert spread["ttfa_ms"] == pytest.approx([182, 202])
    assert spread["rtf"] == pytest.approx([0.4, 0.6])
    assert spread["audio_s_per_s"] == pytest.approx([1 / 0.6, 2.5])
    assert spread["split_ms"]["first_rows"] == pytest.approx([50, 70])
    assert spread["split_ms"]["admission"] == pytest.approx([2, 2])


class Engine:
    """An AsyncLLM stand-in: three outputs per request, vLLM's request stats on each."""

    def __init__(self, scheduled_ts: float, first_token_ts: float = 50.0):
        self.scheduled_ts, self.first_token_ts, self.closed = scheduled_ts, first_token_ts, []
        self.model_config = "the engine's own"

    async def generate(self, prompt, params, request_id: str):
        try:
            for step in range(3):  # the first output's instants count
                stats = SimpleNamespace(scheduled_ts=self.scheduled_ts + step, first_token_ts=self.first_token_ts + step)
                yield SimpleNamespace(request_id=request_id, metrics=stats)
        finally:
            self.closed.append(request_id)


def test_admission_and_first_token_are_the_first_outputs_core_instants():
    async def run():
        engine = AdmissionTimes(Engine(scheduled_ts=42.5))
        outputs = [o async for o in engine.generate("prompt", "params", request_id="a")]
        partial = engine.generate("prompt", "params", request_id="b")
        await anext(partial)
        await partial.aclose()
        return engine, outputs

    engine, outputs = asyncio.run(run())
    assert len(outputs) == 3 and engine.scheduled == {"a": 42.5, "b": 42.5}
    assert engine.first_token == {"a": 50.0, "b": 50.0}
    assert engine.engine.closed == ["a", "b"], "closing early closes (aborts) the engine's stream"
    assert engine.model_config == "the engine's own"


@pytest.mark.parametrize("missing", ["scheduled_ts", "first_token_ts"])
def test_admission_without_vllms_request_stats_is_an_error(missing):
    async def run():
        engine = Engine(**{"scheduled_ts": 42.5, missing: 0.0})
        async for _ in AdmissionTimes(engine).generate("prompt", "params", request_id="a"):
            pass

    with pytest.raises(RuntimeError, match=f"metrics.{missing}.*disable_log_stats"):
        asyncio.run(run())


def results() -> dict:
    rounds = [round_figures([stream(0, 0.002, 0.01, 0.05 + 0.01 * i, 0.1, 0.02)], wall_s=0.5) for i in range(3)]
    e2e = [{"concurrency": c, "streams": 3, **level_figures(rounds), "rounds": rounds} for c in (1, 4)]
    engine = [{"sampling": "greedy", "concurrency": 1, "ms_per_step": 4.0, "spread": {"ms_per_step": [3.9, 4.4]}}]
    phases = [{"name": "talker/default", "kind": "talker", "profile": "default", "runner": "v2", "status": "ok",
               "message": None, "e2e": e2e, "engine": engine},
              {"name": "bare/default", "kind": "bare", "profile": "default", "runner": "v2", "status": "ok",
               "message": None, "e2e": [], "engine": [{**engine[0], "ms_per_step": 3.6}]}]
    out = {"device": "made up", "vllm_version": "0.32.0", "phases": phases,
           "settings": {"size": "tiny", "modes": ["e2e", "engine"], "rounds": 3, "engine_repeats": 3}}
    out["ratios"] = summary.step_ratios(phases)
    out["backbone_bound"] = summary.backbone_bound(phases, 0.04)
    return out


def test_the_table_prints_each_median_with_its_range():
    text = summary.table(results())
    assert "the median of 3 rounds" in text
    assert "192 (182-202)" in text  # TTFA, ms
    assert "   60 (50-70)" in text and "   10 (10-10)" in text  # the first rows and prefill parts
    assert "4.00 (3.90-4.40)" in text and " 1.11" in text  # talker ms/step, the ratio to bare's 3.60


def test_the_plot_draws_the_split(tmp_path):
    plot(results(), tmp_path / "speed.png")
    assert (tmp_path / "speed.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
