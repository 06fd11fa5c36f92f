"""The admission queue's counts are exact under any arrival pattern (issue #54, reference/serve/admission.py):
running <= slots and waiting <= serving.max_waiting_requests at every instant, a freed slot counted
as running from its hand-over (never also as waiting), a client that leaves frees its place in line
at once and takes no slot with it, and every refusal names the limit really met.

Driven on the event loop itself, without wall time: "at once" is tasks created in one pass and
then one `await asyncio.sleep(0)` (every task's first step runs before the check resumes), and the
queue-wait timers run on a loop whose clock the check moves (`moved_clock`). The issue's goal, 4 x
slots requests at once repeated 20 times with the `default` profile's limits, runs here and over
HTTP (a fake speaker holding its slots behind a real uvicorn)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import torch

from reference.deploy.resolve import resolve_deployment
from reference.serve.admission import Admission, Overloaded, ServingLimits, Ticket
from reference.serve.metrics import ServeMetrics, metric, parse_metrics
from reference.serve.wav import pcm16
from tests.test_serve_failures import BODY, Served, ScriptedSpeaker

# No engine and no platform: the GPU selection runs these too. The overload of a real server:
# conformance/serving/test_server_limits.py, on the CPU and on CUDA.
pytestmark = pytest.mark.every_platform

ROUNDS = 20
DEFAULT = ServingLimits.from_deployment(resolve_deployment("default", "cpu", {}))  # 16 slots, 16 waiting


def moved_clock(check):
    """Runs `check(advance)` on a fresh event loop whose clock stands still until `advance(s)`
    moves it: the queue-wait timers fire when the check says, never by wall time."""
    loop, now = asyncio.new_event_loop(), [0.0]
    loop.time = lambda: now[0]
    try:
        return loop.run_until_complete(check(lambda s: now.__setitem__(0, now[0] + s)))
    finally:
        loop.close()


async def settle() -> None:
    """A few passes of the loop: due timers run, and the tasks they wake."""
    for _ in range(4):
        await asyncio.sleep(0)


def arrive(admission: Admission, n: int) -> list[asyncio.Task]:
    return [asyncio.create_task(admission.admit()) for _ in range(n)]


def held(tasks) -> list[Ticket]:
    return [t.result() for t in tasks if t.done() and not t.cancelled() and t.exception() is None]


def refused(tasks, limit: str | None = None) -> list[Overloaded]:
    errors = [t.exception() for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
    assert all(isinstance(e, Overloaded) for e in errors), errors
    return [e for e in errors if limit is None or e.limit == f"serving.{limit}"]


def pending(tasks) -> list[asyncio.Task]:
    return [t for t in tasks if not t.done()]


async def run_through(tasks) -> list[asyncio.Task]:
    """Gives each slot back as soon as its task holds it, until no task waits: the tasks in the
    order they got their slots (the ones holding one already first)."""
    order = []
    for _ in range(2 * len(tasks) + 2):
        fresh = [t for t in tasks if t not in order and t.done() and not t.cancelled() and t.exception() is None]
        if not fresh and not pending(tasks):
            return order
        for task in fresh:
            order.append(task)
            task.result().release()
        await asyncio.sleep(0)
    raise AssertionError(f"{len(pending(tasks))} requests still wait with every slot given back: hung")


async def filled(admission: Admission) -> tuple[list[Ticket], list[asyncio.Task]]:
    """Every slot held and the line full: the tickets, and the waiters' tasks in arrival order."""
    limits = admission.limits
    tasks = arrive(admission, limits.slots + limits.max_waiting_requests)
    await asyncio.sleep(0)
    assert (admission.running, admission.waiting) == (limits.slots, limits.max_waiting_requests)
    return held(tasks), tasks[limits.slots:]


@pytest.mark.parametrize("limits", [DEFAULT, ServingLimits(1, 0, 10.0), ServingLimits(3, 1, 10.0),
                                    ServingLimits(4, 8, 10.0)], ids=["default", "1+0", "3+1", "4+8"])
@pytest.mark.parametrize("per_slot", [1, 2, 4])
@pytest.mark.parametrize("burst", [0, 1, 5], ids=["at_once", "spaced", "bursts_of_5"])
def test_arrivals_fill_the_slots_then_the_line_and_no_more(limits, per_slot, burst):
    """All in one event-loop pass, one a pass, or five a pass: the first `slots` run, the next
    `max_waiting_requests` wait, every other is turned away naming serving.max_waiting_requests
    and the counts it met."""

    async def check(advance):
        admission, tasks, count = Admission(limits, ServeMetrics()), [], per_slot * limits.slots
        while len(tasks) < count:
            tasks += arrive(admission, min(burst or count, count - len(tasks)))
            await asyncio.sleep(0)
        expect_held = min(len(tasks), limits.slots)
        expect_waiting = min(len(tasks) - expect_held, limits.max_waiting_requests)
        assert (admission.running, admission.waiting) == (expect_held, expect_waiting)
        assert len(held(tasks)) == expect_held and len(pending(tasks)) == expect_waiting
        turned_away = refused(tasks, "max_waiting_requests")
        assert len(turned_away) == len(tasks) - expect_held - expect_waiting == len(refused(tasks))
        for error in turned_away:
            assert (f"all {limits.slots} talker slots are busy and {limits.max_waiting_requests} requests wait"
                    in error.message), error.message
        assert await run_through(tasks) == tasks[:expect_held + expect_waiting]  # in arrival order
        assert (admission.running, admission.waiting) == (0, 0)

    moved_clock(check)


def test_four_times_the_slots_at_once_twenty_times_gives_the_default_profiles_counts():
    """The issue's goal on the admission itself: 64 at once against `default`'s 16 slots + 16
    places, 20 times on one queue: 16 running / 16 waiting / 32 refused every time; then every
    waiter runs, in arrival order; none lost, none hung, and the metrics agree."""
    slots, places = DEFAULT.slots, DEFAULT.max_waiting_requests
    assert (slots, places) == (16, 16)
    metrics = ServeMetrics()

    async def check(advance):
        admission = Admission(DEFAULT, metrics)
        for round_ in range(1, ROUNDS + 1):
            tasks = arrive(admission, 4 * slots)
            await asyncio.sleep(0)
            counts = (admission.running, admission.waiting, len(refused(tasks, "max_waiting_requests")))
            assert counts == (slots, places, 2 * slots), f"round {round_}: running, waiting, refused {counts}"
            assert parse_metrics(metrics.render().decode())["higgs_serve_queue_depth"] == places
            for ticket in held(tasks):
                ticket.release()
            assert (admission.running, admission.waiting) == (slots, 0)  # handed over, not waiting
            await asyncio.sleep(0)
            assert [t for t in tasks if t.done() and t.exception() is None] == tasks[:slots + places]
            await run_through(tasks[slots:])
            assert (admission.running, admission.waiting) == (0, 0) and not pending(tasks)
        values = parse_metrics(metrics.render().decode())
        assert values['higgs_serve_rejected_total{limit="max_waiting_requests"}'] == 2 * slots * ROUNDS
        assert metric(values, "higgs_serve_queue_depth") == 0

    moved_clock(check)


@pytest.mark.parametrize("freed, newcomers", [(1, 1), (1, 3), (5, 5), (5, 9), (16, 20)])
def test_arrivals_while_slots_are_handed_over_take_exactly_the_places_freed(freed, newcomers):
    """Every slot held and the line full; in one pass `freed` tickets come back and `newcomers`
    arrive. The oldest `freed` waiters run from the hand-over (so they wait no more), the
    newcomers take the places they left, the rest is turned away."""

    async def check(advance):
        admission = Admission(DEFAULT, ServeMetrics())
        tickets, waiters = await filled(admission)
        for ticket in tickets[:freed]:
            ticket.release()
        assert (admission.running, admission.waiting) == (DEFAULT.slots, DEFAULT.max_waiting_requests - freed)
        late = arrive(admission, newcomers)
        await asyncio.sleep(0)
        joined = min(freed, newcomers)
        assert (admission.running, admission.waiting) == (DEFAULT.slots, DEFAULT.max_waiting_requests - freed + joined)
        assert len(refused(late, "max_waiting_requests")) == newcomers - joined
        assert len(held(waiters)) == freed and held(waiters) == [t.result() for t in waiters[:freed]]
        assert not held(late)  # the line was there first
        for ticket in tickets[freed:]:
            ticket.release()
        await run_through(waiters + late)
        assert (admission.running, admission.waiting) == (0, 0)

    moved_clock(check)


def test_waiters_cancelled_leave_the_line_at_once_and_the_order_holds():
    """Clients that leave while waiting free their places in the same pass (newcomers take them),
    the others keep their order, and every slot comes back."""
    limits = ServingLimits(2, 6, 10.0)

    async def check(advance):
        admission = Admission(limits, ServeMetrics())
        tickets, waiters = await filled(admission)
        left = [waiters[1], waiters[3], waiters[4]]
        for task in left:
            task.cancel()
        assert admission.waiting == 3
        late = arrive(admission, 4)
        await asyncio.sleep(0)
        assert all(t.cancelled() for t in left) and len(refused(late, "max_waiting_requests")) == 1
        assert (admission.running, admission.waiting) == (2, 6)
        for ticket in tickets:
            ticket.release()
        assert await run_through(waiters + late) == [waiters[0], waiters[2], waiters[5], late[0], late[1], late[2]]
        assert (admission.running, admission.waiting) == (0, 0)
        again = arrive(admission, limits.slots)  # no slot leaked: all of them free at once
        await asyncio.sleep(0)
        assert len(held(again)) == limits.slots
        for ticket in held(again):
            ticket.release()

    moved_clock(check)


def test_a_waiter_cancelled_as_its_slot_is_handed_over_gives_the_slot_on():
    """The slot reached the waiter's future, but its client left before the waiter resumed: the
    slot goes to the next in line, and none is lost."""

    async def check(advance):
        admission = Admission(ServingLimits(1, 2, 10.0), ServeMetrics())
        (ticket,), (first, second) = await filled(admission)
        ticket.release()
        first.cancel()
        await asyncio.sleep(0)
        assert first.cancelled() and (admission.running, admission.waiting) == (1, 0)
        assert await run_through([second]) == [second]
        assert (admission.running, admission.waiting) == (0, 0)

    moved_clock(check)


def test_a_wait_past_max_queue_wait_s_is_refused_naming_it_and_frees_the_place():
    limits = ServingLimits(1, 2, 10.0)

    async def check(advance):
        admission = Admission(limits, ServeMetrics())
        (ticket,), waiters = await filled(admission)
        advance(9.9)
        await asyncio.sleep(0)
        assert not any(t.done() for t in waiters)
        advance(0.2)
        await settle()
        assert [e.limit for e in refused(waiters)] == ["serving.max_queue_wait_s"] * 2
        assert "within serving.max_queue_wait_s 10 s" in refused(waiters)[0].message
        assert (admission.running, admission.waiting) == (1, 0)
        late = arrive(admission, 1)  # the places are free again
        await asyncio.sleep(0)
        assert admission.waiting == 1
        advance(10.0)  # its timer is due, and in the same pass its slot comes: the slot was first
        ticket.release()
        await settle()
        assert len(held(late)) == 1 and not refused(late)
        held(late)[0].release()
        assert (admission.running, admission.waiting) == (0, 0)

    moved_clock(check)


def test_refuse_all_turns_away_every_waiter_and_every_arrival_with_its_error():
    """The server's dead engine: the waiters get the error in the next pass, arrivals at once."""

    class Dead(Exception):
        pass

    async def check(advance):
        admission = Admission(ServingLimits(2, 3, 10.0), ServeMetrics())
        tickets, waiters = await filled(admission)
        admission.refuse_all(Dead)
        assert admission.waiting == 0
        late = arrive(admission, 2)
        await asyncio.sleep(0)
        assert all(isinstance(t.exception(), Dead) for t in waiters + late)
        for ticket in tickets:
            ticket.release()
        assert (admission.running, admission.waiting) == (0, 0)

    moved_clock(check)


CHUNK = torch.full((960,), 0.25)


class HoldingSpeaker(ScriptedSpeaker):
    """Streams a chunk, then holds its slot until the check sets `go`, then a second chunk."""

    def __init__(self):
        super().__init__([])

    async def stream(self, request, request_id, received, ticket=None, usage=None):
        try:
            yield CHUNK
            while not self.go.is_set():
                await asyncio.sleep(0.005)
            yield CHUNK
        finally:
            if ticket is not None:
                ticket.release()


def test_four_times_the_slots_at_once_over_http_twenty_times():
    """The goal over HTTP with `default`'s limits: 64 requests at once, the first 16 holding their
    slots; every round 16 stream, 16 wait (the queue's depth), 32 get 503 naming
    serving.max_waiting_requests; once the holders end, the 16 waiters stream too. 0 lost, 0 hung."""
    speaker = HoldingSpeaker()
    slots, places = DEFAULT.slots, DEFAULT.max_waiting_requests
    began = time.monotonic()
    with Served(speaker, DEFAULT) as s:

        async def one(client, statuses):
            async with client.stream("POST", "/v1/audio/speech", json=BODY) as response:
                statuses.append(response.status_code)
                return response.status_code, await response.aread(), response.headers.get("retry-after")

        async def round_():
            async with httpx.AsyncClient(base_url=s.url, timeout=30, limits=httpx.Limits(max_connections=8 * slots)) as c:
                return await burst(c)

        async def burst(client):
            speaker.go.clear()
            statuses = []
            tasks = [asyncio.create_task(one(client, statuses)) for _ in range(4 * slots)]
            deadline, answered = time.monotonic() + 30, 4 * slots - places  # the waiters have no answer yet
            while True:
                depth = metric(parse_metrics((await client.get("/metrics")).text), "higgs_serve_queue_depth")
                if len(statuses) > answered or (len(statuses) == answered and depth == places):
                    break
                assert time.monotonic() < deadline, f"hung: {len(statuses)} answered, {depth:g} waiting"
                await asyncio.sleep(0.01)
            counts = (statuses.count(200), depth, statuses.count(503))
            assert counts == (slots, places, 2 * slots), f"streaming, waiting, refused: {counts}"
            speaker.go.set()
            return await asyncio.wait_for(asyncio.gather(*tasks), 30)

        async def rounds():  # a client of its own each round: new connections, as new clients come
            return [await round_() for _ in range(ROUNDS)]

        answers = asyncio.run(rounds())
        values = s.metrics()
    for n, answered in enumerate(answers, 1):
        served = [body for status, body, _ in answered if status == 200]
        turned_away = [(body, after) for status, body, after in answered if status == 503]
        assert (len(served), len(turned_away)) == (2 * slots, 2 * slots), f"round {n}"
        assert all(body == pcm16(CHUNK) * 2 for body in served)
        assert all(b'"param":"serving.max_waiting_requests"' in body and after == "10" for body, after in turned_away)
    assert values['higgs_serve_rejected_total{limit="max_waiting_requests"}'] == 2 * slots * ROUNDS
    assert metric(values, "higgs_serve_queue_depth") == 0
    print(f"{ROUNDS} rounds of {4 * slots} in {time.monotonic() - began:.1f} s")
