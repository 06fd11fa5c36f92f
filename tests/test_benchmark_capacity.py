"""The capacity search (benchmarks/capacity.py) without an engine: a level's pass or fail on made-up
records, the levels the search picks and its figure against made-up limits (and a made-up clock
for the budget), the steady loop's streams against a made-up request, then whole searches through
HTTP against a fake speech server (Starlette under uvicorn in a thread, tests/loopback.py) that
streams PCM ahead of real time until more than LIMIT streams are in flight, and past that stalls
every stream or sends its first audio late: the search must find about LIMIT, and more for a fake
with a higher one. Timings are coarse (0.3 s of lead, 0.8 s late): the 2-core CI machine may be busy."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

from benchmarks import capacity
from benchmarks.capacity import bracket, in_flight, next_streams, search, steady_loop, ttfa_by_in_flight, verdict
from benchmarks.served import BYTES_PER_S, level_figures
from tests.loopback import serving

pytestmark = pytest.mark.cpu

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --- a level's pass or fail -------------------------------------------------------------------

def record(ttfa: float | None, stalled: bool = False, error_kind: str | None = None, sent: float = 0.0) -> dict:
    return {"sent_s": sent, "ttfa_s": ttfa, "headers_s": ttfa, "total_s": 1.0, "audio_s": 10.0,
            "stalls_s": [0.2] if stalled else [], "ok": error_kind is None, "error_kind": error_kind}


def level_of(records: list[dict], timed_out: bool = False) -> dict:
    return {"timed_out": timed_out, **level_figures(records, 0.3), "played_through": capacity.played_through(records)}


def test_a_level_passes_with_one_stall_in_a_hundred_and_fails_with_two():
    steady = [record(0.1) for _ in range(98)]
    assert verdict(level_of(steady + [record(0.1), record(0.1, stalled=True)]), 0.99, 300) == []
    reasons = verdict(level_of(steady + [record(0.1, stalled=True)] * 2), 0.99, 300)
    assert reasons == ["98.0% played through without a stall, under 99.0%"]
    assert verdict(level_of(steady + [record(0.1, stalled=True)] * 2), 0.98, 300) == []  # the share is a setting


def test_a_failed_stream_counts_as_not_played_through():
    steady = [record(0.1) for _ in range(98)]
    level = level_of(steady + [record(None, error_kind="status 503"), record(0.05, error_kind="RemoteProtocolError")])
    assert level["played_through"] == pytest.approx(0.98) and level["ttfa_ms"]["p99"] == pytest.approx(100)
    assert verdict(level, 0.99, 300) == ["98.0% played through without a stall, under 99.0%"]
    refused = level_of([record(None, error_kind="status 503")] * 4)
    assert verdict(refused, 0.99, 300) == ["0.0% played through without a stall, under 99.0%", "no stream answered"]


def test_a_level_fails_on_its_ttfa_p99_its_time_limit_or_no_stream():
    late = [record(0.1) for _ in range(97)] + [record(0.9)] * 3  # the top three: p99 900 ms
    assert verdict(level_of(late), 0.99, 300) == ["TTFA p99 900 ms, over 300"]
    assert verdict(level_of(late), 0.99, 1000) == []  # the TTFA target is a setting
    assert verdict(level_of([record(0.1)] * 4, timed_out=True), 0.99, 300) == ["ran past --level-timeout"]
    assert verdict(level_of([]), 0.99, 300) == ["no stream counted"]


# --- the levels the search picks --------------------------------------------------------------

def run_search(limit: int, start: int = 16, top: int = 512, resolution: int = 8, budget_s: float = 1e9,
               clock=time.monotonic) -> tuple[list[int], dict]:
    """The search against a server that holds exactly `limit` streams."""
    async def measure(streams: int) -> dict:
        return {"streams": streams, "passed": streams <= limit}

    figure = asyncio.run(search(measure, start, top, resolution, budget_s, clock))
    return [level["streams"] for level in figure.pop("levels")], figure


def test_the_search_doubles_until_a_level_fails_then_bisects_to_the_resolution():
    levels, figure = run_search(100)
    assert levels == [16, 32, 64, 128, 96, 112, 104]
    assert figure == {"streams": 96, "first_failing": 104, "at_least": False, "finished": True}
    assert run_search(100, resolution=1)[1]["streams"] == 100
    assert run_search(256, resolution=1)[0] == [16, 32, 64, 128, 256, 512, 384, 320, 288, 272, 264, 260, 258, 257]


@pytest.mark.parametrize("limit, resolution", [(1, 1), (7, 1), (37, 4), (100, 8), (300, 16), (511, 8)])
def test_the_figure_is_within_the_resolution_below_the_limit(limit, resolution):
    levels, figure = run_search(limit, resolution=resolution)
    assert limit - resolution < figure["streams"] <= limit < figure["first_failing"]
    assert figure["first_failing"] - figure["streams"] <= resolution and len(levels) == len(set(levels))


def test_a_server_that_holds_every_level_is_held_at_least_the_last_step():
    levels, figure = run_search(10_000)
    assert levels == [16, 32, 64, 128, 256, 512] and figure["streams"] == 512 and figure["at_least"]
    assert run_search(10_000, top=500)[0] == [16, 32, 64, 128, 256, 500]  # the last step is the top, not past it


def test_a_server_that_fails_the_first_level_is_searched_below_it():
    assert run_search(5, resolution=4) == ([16, 8, 4], {"streams": 4, "first_failing": 8, "at_least": False,
                                                          "finished": True})
    assert run_search(0, resolution=4)[1]["streams"] == 0  # none held: 0, not the first level


def test_no_level_starts_that_would_end_past_the_budget():
    now = [0.0]

    def clock() -> float:
        return now[0]

    async def measure(streams: int) -> dict:
        now[0] += streams  # a level of c streams takes c seconds
        return {"streams": streams, "passed": True}

    # 16 ends at 16 s; 32 (taken to last 16 s) at 48; 64 (taken to last 32 s) would end at 80, past 60
    figure = asyncio.run(search(measure, 16, 512, 8, 60.0, clock))
    assert [level["streams"] for level in figure["levels"]] == [16, 32]
    assert (figure["streams"], figure["at_least"], figure["finished"]) == (32, True, False)


def test_the_bracket_is_the_largest_pass_below_the_smallest_fail():
    assert bracket({}) == (0, None) and bracket({16: True, 32: True}) == (32, None)
    assert bracket({16: True, 32: False, 24: True, 28: False}) == (24, 28)
    assert bracket({16: False, 8: True}) == (8, 16) and bracket({16: False}) == (0, 16)
    assert next_streams({16: True, 32: False, 24: True, 28: False}, 16, 512, 4) is None
    assert next_streams({16: True, 32: False, 24: True, 28: False}, 16, 512, 2) == 26


# --- the streams in flight ----------------------------------------------------------------------

def test_streams_in_flight_over_the_counted_span():
    counted = [{"sent_s": 1.0, "total_s": 2.0}, {"sent_s": 2.0, "total_s": 2.0}]  # span 1 to 4 s
    extra = [{"sent_s": 0.0, "total_s": 1.0},  # ends as the span begins: not in it
             {"sent_s": 0.5, "total_s": 2.0},  # 1 to 2.5 of the span
             {"sent_s": 3.0, "total_s": 5.0}]  # 3 to 4 of it
    figures = in_flight(counted, extra)
    assert figures["mean"] == pytest.approx((2 + 2 + 1.5 + 1) / 3)
    assert figures["peak"] == 3  # at 2 s: the two counted and the second extra
    assert in_flight([], extra) == {"mean": None, "peak": None}


def test_the_first_audio_is_grouped_by_the_requests_in_flight_as_it_was_asked_for():
    counted = [{**record(0.2, sent=0.0), "total_s": 10.0},  # alone: 1 in flight
               {**record(0.3, sent=1.0), "total_s": 10.0},  # 2: the first and itself (the extra at 0.2 ended)
               {**record(0.5, sent=2.0), "total_s": 10.0},  # 4: the two before, the extra sent at 1.5, itself
               {**record(0.7, sent=2.5), "total_s": 10.0},  # 5
               {**record(None, error_kind="ReadError", sent=3.0)}]  # failed: no first audio to group
    extra = [{"sent_s": 1.5, "total_s": 5.0}, {"sent_s": 0.2, "total_s": 0.5}]
    groups = ttfa_by_in_flight(counted, extra, width=2)
    assert groups == [{"in_flight": [0, 1], "requests": 1, "ttfa_p50_ms": 200.0, "ttfa_max_ms": 200.0},
                      {"in_flight": [2, 3], "requests": 1, "ttfa_p50_ms": 300.0, "ttfa_max_ms": 300.0},
                      {"in_flight": [4, 5], "requests": 2, "ttfa_p50_ms": 600.0, "ttfa_max_ms": 700.0}]
    assert ttfa_by_in_flight([], extra) == []


class PacedSpeech:
    """Speech's measure without HTTP: each request takes `seconds`; its record notes how many were
    in flight when it was sent, itself included."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.now = seconds, 0

    async def measure(self, t0: float, sink: list) -> dict:
        sent, self.now = time.perf_counter() - t0, self.now + 1
        seen = self.now
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.now -= 1
        sink.append(done := {**record(0.01, sent=sent), "total_s": time.perf_counter() - t0 - sent, "seen": seen})
        return done


def test_a_level_keeps_its_streams_in_flight_and_counts_each_clients_rounds():
    speech, counted, extra = PacedSpeech(0.2), [], []
    asyncio.run(steady_loop(speech, 6, 2, 0.3, 0, extra, counted))
    assert len(counted) == 6 * 2 and speech.now == 0  # every request ended with the level
    assert [r["seen"] for r in counted] == [6] * 12  # each sent once all six had started, beside five others
    assert max(r["seen"] for r in extra) <= 6 and extra  # the ramp's and the fill's
    figures = in_flight(counted, extra)
    assert figures["peak"] == 6 and figures["mean"] > 5  # the fill keeps six in flight to the last counted end
    starts = sorted(r["sent_s"] for r in counted + extra)[:6]
    assert starts[-1] - starts[0] > 0.05  # spread over the ramp, not sent together


class AudioSpeech(PacedSpeech):
    """PacedSpeech whose answers bring `audio_s` of audio, the first after `ttfa_s`; each record names its client
    (the task that sent it: one a client)."""

    def __init__(self, seconds: float, ttfa_s: float, audio_s: float) -> None:
        super().__init__(seconds)
        self.ttfa_s, self.audio_s = ttfa_s, audio_s

    async def measure(self, t0: float, sink: list) -> dict:
        done = await super().measure(t0, sink)
        done.update(ttfa_s=self.ttfa_s, audio_s=self.audio_s, client=id(asyncio.current_task()))
        return done


def test_a_listener_asks_again_once_the_audio_has_played_so_fewer_requests_are_in_flight():
    speech, counted, extra = AudioSpeech(0.1, ttfa_s=0.05, audio_s=0.4), [], []
    asyncio.run(steady_loop(speech, 4, 2, 0.4, 0, extra, counted, listen=True))
    assert len(counted) == 4 * 2 and speech.now == 0
    every = sorted(counted + extra, key=lambda r: r["sent_s"])
    for first in every:  # the same client's next send: not before its audio has played (0.05 + 0.4 s)
        later = [r["sent_s"] for r in every if r["sent_s"] > first["sent_s"] and r["client"] == first["client"]]
        assert not later or later[0] >= first["sent_s"] + 0.45 - 0.01
    figures = in_flight(counted, extra)
    assert figures["peak"] < 4 and figures["mean"] < 2  # answers of 0.1 s for 0.45 s cycles: about one in four


def test_a_listeners_audio_plays_out_after_its_first_audio_its_length_and_its_stalls():
    assert capacity.played_out_s({**record(0.3, stalled=True), "audio_s": 10.0}) == pytest.approx(0.3 + 10.0 + 0.2)
    assert capacity.played_out_s(record(None, error_kind="ReadError")) == 1.0  # a failure: its own end


# --- whole searches against a fake server -------------------------------------------------------

FAKE = {"limit": 3, "past": "stall", "in_flight": 0, "most": 0, "answers": 0}  # what the fake does past its limit


async def speech(request: Request):
    await request.body()

    async def chunks():
        FAKE["in_flight"] += 1
        FAKE["most"] = max(FAKE["most"], FAKE["in_flight"])
        crowded = FAKE["in_flight"] > FAKE["limit"]
        try:
            if crowded and FAKE["past"] == "late":
                await asyncio.sleep(0.8)  # first audio past the 300 ms target
            # 0.6 s of audio: 0.3 s at once, then 0.1 s every 0.1 s (0.3 s ahead of playback); stalling,
            # 0.1 s at once, then 0.1 s every 0.3 s (each 0.2 s late)
            lead, gap = (0.1, 0.3) if crowded and FAKE["past"] == "stall" else (0.3, 0.1)
            FAKE["answers"] += 1
            yield b"\x01\x00" * round(lead * BYTES_PER_S / 2)
            for _ in range(3):
                await asyncio.sleep(gap)
                yield b"\x01\x00" * round(0.1 * BYTES_PER_S / 2)
        finally:
            FAKE["in_flight"] -= 1

    return StreamingResponse(chunks(), media_type="audio/pcm")


async def models(request: Request):
    return JSONResponse({"object": "list", "data": [{"id": "fake-tts", "object": "model"}]})


async def metrics(request: Request):
    """As ours counts them: each answer's TTFA 4 ms, 1 ms of it in the code2wav stage."""
    n = FAKE["answers"]
    return PlainTextResponse(f"higgs_serve_ttfa_seconds_count {n}\nhiggs_serve_ttfa_seconds_sum {0.004 * n}\n"
                             f"higgs_serve_first_decode_seconds_count {n}\nhiggs_serve_first_decode_seconds_sum "
                             f"{0.001 * n}\n")


APP = Starlette(routes=[Route("/v1/audio/speech", speech, methods=["POST"]), Route("/v1/models", models),
                        Route("/metrics", metrics)])
RESOLUTION = 2


@pytest.fixture(scope="module")
def searches(tmp_path_factory):
    """Two searches from 2 streams: a fake holding 3 that stalls past them (to 8), one holding 6 that
    sends its first audio late past them (to 12); each one's capacity.json, its PNG and the most
    streams the fake saw at once."""
    found = {}
    with serving(APP) as url:
        for limit, past, top in ((3, "stall", 8), (6, "late", 12)):
            FAKE.update(limit=limit, past=past, most=0)
            out = tmp_path_factory.mktemp(f"capacity-{limit}")
            argv = ["--base-url", url, "--start", "2", "--max-streams", str(top), "--resolution", str(RESOLUTION),
                    "--rounds", "1", "--warmup", "1", "--max-tokens", "15", "--level-timeout", "60", "--out-dir", str(out)]
            began = time.monotonic()
            assert capacity.main(argv) == 0
            found[limit] = (json.loads((out / "capacity.json").read_text()), (out / "capacity.png").read_bytes(),
                            FAKE["most"], time.monotonic() - began)
    return found


@pytest.mark.parametrize("limit", [3, 6])
def test_the_search_finds_the_fakes_limit_within_the_resolution(searches, limit):
    results, png, most, seconds = searches[limit]
    figure = results["capacity"]
    assert limit - RESOLUTION < figure["streams"] <= limit, (figure, [level["failing"] for level in results["levels"]])
    assert figure["first_failing"] > limit and figure["finished"] and not figure["at_least"]
    assert png[:8] == PNG_SIGNATURE
    levels = results["levels"]
    assert [level["load"] for level in levels][:2] == [2, 4] and most == max(level["load"] for level in levels)
    for level in levels:  # a level of c streams: c counted requests (one round), c in flight at the most
        assert level["kind"] == "steady" and level["requests"] == level["load"] and level["ok"] == level["requests"]
        assert level["in_flight"]["peak"] <= level["load"] and "chunks" not in level["records"][0]
        assert level["passed"] == (level["load"] <= limit), level["failing"]
    stalled = [level for level in levels if level["load"] > limit]
    why = "played through without a stall" if limit == 3 else "TTFA p99"
    assert stalled and all(any(why in reason for reason in level["failing"]) for level in stalled)


def test_a_fake_with_a_higher_limit_gives_a_higher_figure(searches):
    assert searches[6][0]["capacity"]["streams"] > searches[3][0]["capacity"]["streams"]


def test_the_results_name_the_target_criteria_and_machine(searches):
    results = searches[3][0]
    assert results["status"] == "ok" and results["command"].startswith("python -m benchmarks.capacity --base-url")
    assert results["target"]["model"] == "fake-tts" and results["target"]["base_url"].startswith("http://127.0.0.1:")
    assert results["criteria"]["stall_free"] == 0.99 and results["criteria"]["ttfa_p99_ms"] == 300
    assert results["criteria"]["clients"] == "back to back"
    assert 0.2 < results["criteria"]["ramp_s"] < 5  # the warm-up's one request alone: about 0.3 s
    assert results["settings"]["start"] == 2 and results["body"]["max_tokens"] == 15
    assert {"date", "host", "python", "versions", "warmup"} <= set(results)


def test_listeners_hold_fewer_requests_than_there_are_of_them_through_http(tmp_path):
    """The fake answers 0.6 s of audio in about 0.3 s: a listener holds a request about half of its cycle."""
    with serving(APP) as url:
        FAKE.update(limit=100, past="stall", most=0)
        argv = ["--base-url", url, "--listen", "--start", "4", "--max-streams", "8", "--rounds", "1", "--warmup", "1",
                "--max-tokens", "15", "--level-timeout", "60", "--out-dir", str(tmp_path)]
        assert capacity.main(argv) == 0
    results = json.loads((tmp_path / "capacity.json").read_text())
    assert results["criteria"]["clients"] == "listeners"
    assert 0.5 < results["criteria"]["ramp_s"] < 0.7  # one answer's audio (0.6 s), not its time
    assert [level["load"] for level in results["levels"]] == [4, 8]
    for level in results["levels"]:
        assert level["passed"] and level["in_flight"]["mean"] < 0.8 * level["load"]
        answers = level["requests"] + level["uncounted"]["requests"]  # all answered: none failed
        assert level["server"] == {"answers": answers, "ttfa_mean_ms": pytest.approx(4.0),
                                   "first_decode_mean_ms": pytest.approx(1.0)}


def test_the_servers_split_is_the_difference_of_its_counts_and_none_where_it_counts_no_ttfa():
    before = {"higgs_serve_ttfa_seconds_count": 10, "higgs_serve_ttfa_seconds_sum": 2.0}
    after = {"higgs_serve_ttfa_seconds_count": 14, "higgs_serve_ttfa_seconds_sum": 3.0}
    assert capacity.server_split(before, after) == {"answers": 4, "ttfa_mean_ms": pytest.approx(250.0),
                                                    "first_decode_mean_ms": None}  # a server without the stage's
    assert capacity.server_split({}, {}) is None and capacity.server_split(after, after) is None


def test_the_arguments_are_checked(capsys):
    for argv in (["--start", "0"], ["--start", "32", "--max-streams", "16"], ["--stall-free", "1.5"],
                 ["--warmup", "0"]):
        with pytest.raises(SystemExit):
            capacity.parse_args(argv)
    assert "without a warm-up, give --ramp-s" in capsys.readouterr().err
