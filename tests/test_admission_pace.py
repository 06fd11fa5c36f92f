"""The talker's pace and the admission's pace gate (reference/serve/pace.py, `serving.min_realtime_factor`
in reference/serve/admission.py): the pace read from row arrivals under a clock the check moves
(steady, slowing, stalled, in batches, several requests, a source held by its reader); the gate on
the admission itself (a request waits while a slot is free and the pace is under the floor, goes
in once it recovers, is turned away naming serving.min_realtime_factor when its wait runs out;
without the key nothing changes); the Speaker feeding the pace; and over HTTP, a request held
while a slow fake stream runs."""

from __future__ import annotations

import asyncio
import math
import threading

import httpx
import pytest
import torch

from reference.deploy.resolve import resolve_deployment
from reference.serve.admission import Admission, Overloaded, ServingLimits
from reference.serve.audio import Speaker
from reference.serve.metrics import ServeMetrics, metric, parse_metrics
from reference.serve.pace import Pace
from tests.test_serve_failures import BODY, CHUNK, Engine, Served, _background, _post, _until

pytestmark = pytest.mark.every_platform  # no engine, no platform

FLOOR = 1.25 * 25  # steps a second at min_realtime_factor 1.25
# Steps of a power of two of a second keep the clock's sums exact: 16, 32 and 64 steps a second.
SLOW, FAST = 1 / 16, 1 / 64


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def feed(meter, clock: Clock, step_s: float, outputs: int, rows: int = 1) -> None:
    """A source that waits on the engine: `outputs` outputs of `rows` rows, `step_s` apart."""
    for _ in range(outputs):
        clock.advance(step_s)
        meter.rows(rows)
        meter.asking()


def running_at(pace: Pace, clock: Clock, step_s: float, seconds: float = 1.25):
    """A request past its prefill (first output of 8 rows after 0.25 s) making a step every `step_s`."""
    meter = pace.meter()
    clock.advance(0.25)
    meter.rows(8)
    meter.asking()
    feed(meter, clock, step_s, round(seconds / step_s))
    return meter


# The pace

def test_a_steady_talker_reads_25_steps_a_second_once_half_a_window_is_measured():
    clock = Clock()
    pace = Pace(clock)
    meter = pace.meter()
    clock.advance(0.3)  # the prefill: its first rows mark the start, uncounted
    meter.rows(8)
    meter.asking()
    assert pace.steps_per_second() is None
    feed(meter, clock, 0.04, 12)  # 0.48 s: under half a window
    assert pace.steps_per_second() is None
    feed(meter, clock, 0.04, 1)
    assert pace.steps_per_second() == pytest.approx(25)
    feed(meter, clock, 0.04, 200)
    assert pace.steps_per_second() == pytest.approx(25)


def test_a_slowing_talker_reads_its_new_pace_within_a_window():
    clock = Clock()
    pace = Pace(clock)
    meter = running_at(pace, clock, FAST, seconds=2)
    assert pace.steps_per_second() == 64
    feed(meter, clock, SLOW, 8)  # half a window at 16 steps/s, half at 64
    assert pace.steps_per_second() == 40
    feed(meter, clock, SLOW, 8)
    assert pace.steps_per_second() == 16


@pytest.mark.parametrize("after_s", [0.0, 0.1, 0.25, 0.39])
def test_rows_in_batches_read_exactly_wherever_the_window_falls(after_s):
    """vLLM's stream_interval 10 at 25 steps/s: 10 rows every 0.4 s."""
    clock = Clock()
    pace = Pace(clock)
    meter = pace.meter()
    clock.advance(0.3)
    meter.rows(10)
    meter.asking()
    feed(meter, clock, 0.4, 7, rows=10)
    clock.advance(after_s)
    assert pace.steps_per_second() == pytest.approx(25)


def test_a_talker_that_stalls_drags_the_pace_down_while_its_requests_wait():
    clock = Clock()
    pace = Pace(clock)
    running_at(pace, clock, 1 / 32, seconds=2)
    clock.advance(0.75)  # within a window of its last rows: still its measured pace
    assert pace.steps_per_second() == 32
    clock.advance(1.25)  # 2 s without rows while it waits for them: 32 rows in the 3 s since its anchor
    assert pace.steps_per_second() == pytest.approx(32 / 3)
    clock.advance(7)
    assert pace.steps_per_second() == pytest.approx(32 / 10)


def test_a_source_held_by_its_reader_is_not_a_slow_talker():
    """Its rows wait in vLLM's queue while the stage holds it; taken late, they arrive together:
    the request stops being measured, and starts over from that arrival."""
    clock = Clock()
    pace = Pace(clock)
    meter = running_at(pace, clock, 0.04, seconds=2)
    clock.advance(0.04)
    meter.rows(1)  # and the stage holds the source: no asking() for 1.5 s
    clock.advance(1.5)
    assert pace.steps_per_second() is None, "held longer than a window: old news"
    meter.asking()
    meter.rows(37)  # at once: the rows made while it was held
    meter.asking()
    assert pace.steps_per_second() is None, "the late rows are not counted"
    feed(meter, clock, 0.04, 13)
    assert pace.steps_per_second() == pytest.approx(25)


def test_the_pace_is_the_fastest_measured_request():
    """Every running request gets a row a step: one reading slower is held back by its reader.
    A request just started, or one whose reader holds it back at every output, is not measured."""
    clock = Clock()
    pace = Pace(clock)
    steady, slower, behind, fresh = (pace.meter() for _ in range(4))
    for meter in (steady, slower, behind):
        meter.rows(8)
        meter.asking()
    for tick in range(1, 201):  # 2 s in ticks of 10 ms
        clock.advance(0.01)
        for meter, every in ((steady, 4), (slower, 5)):  # 25 and 20 rows a second
            if tick % every == 0:
                meter.rows(1)
                meter.asking()
        if tick % 20 == 0:  # its reader held it 0.2 s: 5 rows waited for it, taken at once
            behind.asking()
            behind.rows(5)
        if tick >= 160 and tick % 4 == 0:  # started 0.4 s ago
            fresh.rows(8 if tick == 160 else 1)
            fresh.asking()
    now = clock()
    assert (steady.rate(now), slower.rate(now)) == (pytest.approx(25), pytest.approx(20))
    assert behind.rate(now) is None and fresh.rate(now) is None
    assert pace.steps_per_second() == pytest.approx(25)
    steady.end()
    assert pace.steps_per_second() == pytest.approx(20)
    slower.end()
    assert pace.steps_per_second() is None


def test_rows_call_the_admission_at_most_once_per_notify_s():
    clock = Clock()
    pace = Pace(clock, notify_s=4)
    calls = []
    pace.on_rows = lambda: calls.append(clock())
    feed(pace.meter(), clock, 1, 40)
    assert calls == [1, 5, 9, 13, 17, 21, 25, 29, 33, 37]


# The gate, on the admission

def on_clock(check):
    """Runs `check(clock)` on a fresh loop whose time is `clock` (the pace's too): the queue-wait
    timers fire when the check moves it, never by wall time."""
    clock, loop = Clock(), asyncio.new_event_loop()
    loop.time = clock
    try:
        return loop.run_until_complete(check(clock))
    finally:
        loop.close()


async def settle() -> None:
    for _ in range(4):
        await asyncio.sleep(0)


def gated(clock: Clock, factor: float | None = 1.25, slots: int = 4, waiting: int = 4, wait_s: float = 10.0):
    pace = Pace(clock)
    limits = ServingLimits(slots, waiting, wait_s, "test.yaml", factor)
    return Admission(limits, ServeMetrics(), pace), pace


def test_under_the_floor_a_request_waits_with_a_slot_free_and_goes_in_once_the_pace_recovers():
    async def check(clock):
        admission, pace = gated(clock)
        first = await admission.admit()  # nothing runs: in, whatever the pace
        meter = running_at(pace, clock, SLOW)
        second = asyncio.create_task(admission.admit())
        await settle()
        assert not second.done() and (admission.running, admission.waiting) == (1, 1)
        while pace.steps_per_second() < FLOOR:  # the talker speeds up to 64 steps/s
            assert not second.done()
            feed(meter, clock, FAST, 1)
            await settle()
        feed(meter, clock, FAST, 3)  # the admission hears of rows at most every 0.04 s
        await settle()
        assert second.done() and (admission.running, admission.waiting) == (2, 0)
        second.result().release()
        first.release()
        assert admission.running == 0

    on_clock(check)


def test_a_request_held_past_max_queue_wait_s_is_turned_away_naming_min_realtime_factor():
    async def check(clock):
        admission, pace = gated(clock, wait_s=2.0)
        await admission.admit()
        meter = running_at(pace, clock, SLOW)
        held = asyncio.create_task(admission.admit())
        await settle()
        feed(meter, clock, SLOW, 31)  # 1.9375 s: still waiting
        await settle()
        assert not held.done()
        feed(meter, clock, SLOW, 1)  # 2 s
        await settle()
        error = held.exception()
        assert isinstance(error, Overloaded) and error.limit == "serving.min_realtime_factor"
        assert error.retry_after_s == 2 and admission.waiting == 0
        assert "16.0 steps/s, under the floor of 31.25 steps/s" in error.message, error.message
        assert "serving.min_realtime_factor 1.25" in error.message and "test.yaml" in error.message
        values = parse_metrics(admission.metrics.render().decode())
        assert values['higgs_serve_rejected_total{limit="min_realtime_factor"}'] == 1

    on_clock(check)


def test_the_oldest_held_request_takes_the_one_free_slot():
    async def check(clock):
        admission, pace = gated(clock, slots=2)
        await admission.admit()
        meter = running_at(pace, clock, SLOW)
        older = asyncio.create_task(admission.admit())
        await settle()
        newer = asyncio.create_task(admission.admit())
        await settle()
        assert admission.waiting == 2
        feed(meter, clock, FAST, 64)
        await settle()
        assert older.done() and not newer.done(), "the slots are full now: the newer one waits for one"
        assert (admission.running, admission.waiting) == (2, 1)
        older.result().release()  # a slot frees at a pace over the floor
        await settle()
        assert newer.done() and admission.running == 2

    on_clock(check)


def test_a_held_request_goes_in_when_nothing_runs_any_more():
    async def check(clock):
        admission, pace = gated(clock)
        first = await admission.admit()
        meter = running_at(pace, clock, SLOW)
        held = asyncio.create_task(admission.admit())
        await settle()
        assert not held.done()
        meter.end()
        first.release()  # its slot frees and nothing runs: the pace no longer matters
        await settle()
        assert held.done() and admission.running == 1

    on_clock(check)


def test_a_held_request_is_looked_at_again_a_window_later_when_no_rows_come():
    """The running request's reader holds it: no rows arrive, and after a window it is no longer
    measured; the admission looks again then, without any row or slot to wake it."""
    async def check(clock):
        admission, pace = gated(clock)
        await admission.admit()
        meter = running_at(pace, clock, SLOW)
        held = asyncio.create_task(admission.admit())
        await settle()
        clock.advance(SLOW)
        meter.rows(1)  # then held by its reader: no asking()
        clock.advance(0.5)
        await settle()
        assert not held.done()
        clock.advance(0.6)
        await settle()
        assert pace.steps_per_second() is None and held.done()

    on_clock(check)


def test_a_wait_that_runs_out_after_the_gate_opened_goes_in_instead():
    """The gate opened (the running request's reader has held it for a window) between two looks:
    the request whose wait runs out then is let in, not turned away."""
    async def check(clock):
        admission, pace = gated(clock, wait_s=0.5)
        await admission.admit()
        meter = running_at(pace, clock, SLOW)
        clock.advance(SLOW)
        meter.rows(1)  # then held by its reader: no asking()
        clock.advance(0.75)
        held = asyncio.create_task(admission.admit())
        await settle()
        assert not held.done()
        clock.advance(0.5)  # no longer measured 0.25 s ago; no row or slot came to say so
        await settle()
        assert held.done() and held.exception() is None

    on_clock(check)


def test_an_unmeasured_pace_lets_requests_in():
    """Requests let in together, before any has rows measured: the slots bound them, as without
    the gate."""
    async def check(clock):
        admission, pace = gated(clock)
        tickets = [await admission.admit() for _ in range(4)]
        for _ in tickets:
            pace.meter()  # waiting for their first rows
        assert admission.running == 4 and pace.steps_per_second() is None

    on_clock(check)


def test_without_min_realtime_factor_the_pace_changes_nothing():
    async def check(clock):
        admission, pace = gated(clock, factor=None)
        await admission.admit()
        running_at(pace, clock, 1 / 4)  # 4 steps/s
        await admission.admit()
        assert admission.running == 2 and admission.waiting == 0

    on_clock(check)
    with pytest.raises(ValueError, match="serving.min_realtime_factor needs the talker's pace"):
        Admission(ServingLimits(1, 1, 1.0, "test.yaml", 1.25), ServeMetrics())


def test_the_profiles_leave_the_gate_off_and_an_override_turns_it_on():
    for platform in ("cpu", "cuda"):
        assert ServingLimits.from_deployment(resolve_deployment("default", platform, {})).min_realtime_factor is None
    limits = ServingLimits.from_deployment(resolve_deployment("default", "cpu", {"serving.min_realtime_factor": 1.25}))
    assert (limits.min_realtime_factor, limits.min_steps_per_second) == (1.25, FLOOR)


# The Speaker feeds the pace; /metrics shows it

class RowsAPI:
    """Two 40 ms rows an output, 25 outputs, on the check's clock; a stage that passes frames on."""

    def __init__(self, clock: Clock, seen: list):
        self.clock, self.seen, self.pace = clock, seen, None
        self.stage = self

    async def stream_rows(self, request, request_id):
        for _ in range(25):
            self.clock.advance(0.08)
            yield [[0] * 8, [0] * 8]
            self.seen.append(self.pace.steps_per_second())

    async def decode(self, frames):
        return torch.zeros(960)

    async def stream(self, frames):
        async for chunk in frames:
            yield chunk


@pytest.mark.parametrize("kind", ["whole", "stream"])
def test_the_speakers_requests_feed_the_pace_and_metrics_show_it(kind):
    async def check(clock):
        seen = []
        api = RowsAPI(clock, seen)
        speaker = Speaker(api=api, metrics=ServeMetrics(), pace=Pace(clock))
        api.pace = speaker.pace
        gauge = lambda: parse_metrics(speaker.metrics.render().decode())["higgs_serve_talker_steps_per_second"]
        assert math.isnan(gauge())
        if kind == "whole":
            await speaker.whole(None, "r")
        else:
            async for _ in speaker.stream(None, "r", clock()):
                pass
        assert seen[:7] == [None] * 7 and seen[-1] == pytest.approx(25)
        assert speaker.pace.steps_per_second() is None and math.isnan(gauge())  # ended: no longer counted

    on_clock(check)


# Over HTTP

class SlowStreamSpeaker:
    """The first stream runs until `done` is set, a row reaching the pace every `step_s` of the
    pace's clock (16 steps/s; 10 ms of wall time each); every later stream is one chunk."""

    def __init__(self):
        self.clock, self.metrics = Clock(), ServeMetrics()
        self.pace = Pace(self.clock)
        self.metrics.show_pace(self.pace)
        self.api = type("API", (), {"engine": Engine()})()
        self.step_s, self.done, self.streams = SLOW, threading.Event(), 0

    async def stream(self, request, request_id, received, ticket=None, usage=None):
        self.streams += 1
        slow, meter = self.streams == 1, self.pace.meter()
        try:
            yield CHUNK
            while slow and not self.done.is_set():
                await asyncio.sleep(0.01)
                self.clock.advance(self.step_s)
                meter.rows(1)
                meter.asking()
        finally:
            meter.end()
            if ticket is not None:
                ticket.release()


def _pace(served) -> float:
    return metric(served.metrics(), "higgs_serve_talker_steps_per_second")


def test_over_http_a_request_is_held_while_a_slow_stream_runs_and_served_once_it_speeds_up():
    speaker = SlowStreamSpeaker()
    with Served(speaker, ServingLimits(2, 4, 20.0, "test.yaml", 1.25)) as s:
        with httpx.stream("POST", f"{s.url}/v1/audio/speech", json=BODY, timeout=20.0) as slow:
            assert slow.status_code == 200
            _until(lambda: _pace(s) == 16)
            second = _background(lambda: _post(s.url))
            _until(lambda: metric(s.metrics(), "higgs_serve_queue_depth") == 1)
            assert not second.done(), "a slot is free, but the talker is under 1.25 x real time"
            speaker.step_s = FAST
            assert second.result(20).status_code == 200
            assert _pace(s) > FLOOR
            speaker.done.set()
            slow.read()


@pytest.mark.parametrize("factor, status", [(1.25, 503), (None, 200)], ids=["gate", "no_gate"])
def test_over_http_a_request_held_past_its_wait_is_a_503_naming_min_realtime_factor(factor, status):
    speaker = SlowStreamSpeaker()
    with Served(speaker, ServingLimits(2, 4, 0.5, "test.yaml", factor)) as s:
        with httpx.stream("POST", f"{s.url}/v1/audio/speech", json=BODY, timeout=20.0) as slow:
            assert slow.status_code == 200
            _until(lambda: _pace(s) == 16)
            late = _post(s.url)
            speaker.done.set()
            slow.read()
        assert late.status_code == status
        if status == 503:
            assert late.headers["retry-after"] == "1"
            error = late.json()["error"]
            assert (error["type"], error["param"]) == ("server_overloaded", "serving.min_realtime_factor")
            assert "16.0 steps/s, under the floor of 31.25 steps/s" in error["message"], error["message"]
            assert s.metrics()['higgs_serve_rejected_total{limit="min_realtime_factor"}'] == 1
