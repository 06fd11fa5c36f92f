"""The HTTP load benchmark (benchmarks/served.py) without an engine: its stall model, its level
figures and its Poisson schedule on made-up numbers, and its measuring loop against a small
Starlette server under uvicorn (in a thread, on 127.0.0.1) that streams PCM chunks at chosen
instants: a steady stream, one that pauses too long (a stall), a 503 and a body that breaks off.
Timing margins are hundreds of milliseconds: the 2-core CI machine may be busy."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from collections import deque

import httpx
import numpy as np
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from benchmarks import served
from benchmarks.served import BYTES_PER_S, Speech, closed_loop, level_figures, poisson_schedule, stalls
from reference.serve.encode import StreamEncoder
from tests.loopback import serving

pytestmark = pytest.mark.cpu

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def audio(seconds: float) -> bytes:
    return b"\x01\x00" * round(seconds * BYTES_PER_S / 2)


# --- the stall model --------------------------------------------------------------------------

def test_a_stream_faster_than_real_time_never_stalls():
    # 0.2 s of audio every 0.1 s, and a first chunk that arrives late does not count (playback starts there)
    assert stalls([(1.0 + 0.1 * i, 0.2 * BYTES_PER_S) for i in range(50)]) == []


def test_a_late_chunk_stalls_for_exactly_the_time_the_buffer_ran_dry():
    # plays 0.5 s from t=1 -> dry at 1.5; chunk at 1.6 (stall 0.1) plays to 1.7; chunk at 1.65 queues
    # (to 1.8); chunk at 2.3 stalls 0.5; a chunk exactly at the buffer's end is no stall
    chunks = [(1.0, 0.5 * BYTES_PER_S), (1.6, 0.1 * BYTES_PER_S), (1.65, 0.1 * BYTES_PER_S), (2.3, 0.2 * BYTES_PER_S),
              (2.5, 0.1 * BYTES_PER_S)]
    assert stalls(chunks) == pytest.approx([0.1, 0.5])
    assert stalls([]) == [] and stalls([(0.3, 100)]) == []


# --- a level's figures ------------------------------------------------------------------------

def record(sent: float, ttfa: float | None, total: float, audio_s: float, stalled: list[float] = (),
           error_kind: str | None = None) -> dict:
    return {"sent_s": sent, "ttfa_s": ttfa, "headers_s": None if ttfa is None else ttfa / 2, "total_s": total,
            "audio_s": audio_s, "stalls_s": list(stalled), "ok": error_kind is None, "error_kind": error_kind}


def test_level_figures_on_made_up_requests():
    records = [record(0.0, 0.1, 1.0, 4.0), record(0.5, 0.2, 1.0, 4.0), record(1.0, 0.3, 2.0, 4.0, [0.25, 0.5]),
               record(1.5, 0.4, 1.5, 4.0), record(2.0, None, 0.1, 0.0, error_kind="status 503"),
               record(3.0, 0.05, 1.0, 0.5, error_kind="RemoteProtocolError")]
    figures = level_figures(records, slo_ttfa_s=0.25)
    assert (figures["requests"], figures["ok"], figures["failed"]) == (6, 4, 2)
    assert figures["failures"] == {"status 503": 1, "RemoteProtocolError": 1}
    ttfa = figures["ttfa_ms"]  # over the ok requests only: 100, 200, 300, 400 ms
    assert ttfa["p50"] == pytest.approx(250) and ttfa["p90"] == pytest.approx(370) and ttfa["p99"] == pytest.approx(397)
    assert (ttfa["mean"], ttfa["min"], ttfa["max"]) == pytest.approx((250, 100, 400))
    assert figures["headers_ms"]["p50"] == pytest.approx(125)
    assert figures["total_ms"] == pytest.approx({"p50": 1250, "p99": np.percentile([1000, 1000, 2000, 1500], 99)})
    assert figures["rtf_p50"] == pytest.approx(np.median([0.25, 0.25, 0.5, 0.375]))
    assert figures["stall_rate"] == pytest.approx(0.25) and figures["stall_s"] == pytest.approx(0.75)
    assert figures["wall_s"] == pytest.approx(4.0)  # first send 0.0, last byte 3.0 + 1.0 (a failed request counts)
    assert figures["audio_s_per_s"] == pytest.approx(16.0 / 4.0)  # the failed request's 0.5 s is not counted
    # good: ok, TTFA <= 250 ms, no stall -> the first two (the third stalled, the fourth is late)
    assert figures["good"] == 2 and figures["goodput_per_s"] == pytest.approx(0.5)
    assert figures["good_share"] == pytest.approx(2 / 6)


def test_a_level_without_a_successful_request_has_no_latency():
    figures = level_figures([record(0.0, None, 0.2, 0.0, error_kind="status 503")], slo_ttfa_s=0.25)
    assert figures["ok"] == 0 and figures["ttfa_ms"]["p50"] is None and figures["stall_rate"] is None
    assert figures["audio_s_per_s"] == 0 and figures["good_share"] == 0
    served.describe({"kind": "closed", "load": 1, "timed_out": False, **figures})  # prints with the blanks


# --- the Poisson schedule ---------------------------------------------------------------------

def test_the_poisson_schedule_is_seeded_and_its_mean_gap_is_one_over_the_rate():
    rate, n = 8.0, 10_000
    schedule = poisson_schedule(rate, n, seed=5)
    assert schedule == poisson_schedule(rate, n, seed=5) and schedule != poisson_schedule(rate, n, seed=6)
    gaps = np.diff([0.0, *schedule])
    assert np.all(gaps > 0)
    # The gaps are exponential with mean and standard deviation 1/rate; the mean of n of them has
    # a standard deviation of (1/rate)/sqrt(n) = 1 % of 1/rate here, so 5 % is five of those:
    # a seed that fails it is a one-in-a-million draw, not noise.
    assert abs(gaps.mean() * rate - 1) < 0.05
    assert abs(gaps.std() * rate - 1) < 0.05  # exponential (std = mean), not evenly spaced


# --- the measuring loop against a real HTTP server ---------------------------------------------

PLAN: deque = deque()  # what the fake server does with each request it gets, in arrival order
BODIES: list = []


async def speech(request: Request):
    BODIES.append(await request.json())
    scenario = PLAN.popleft() if PLAN else "steady"
    if scenario == "503":
        return JSONResponse({"error": {"message": "the engine is busy"}}, status_code=503)

    async def chunks():
        if scenario == "wav":  # a header alone, then the audio a moment later
            yield b"RIFF" + b"\xff" * 40
            await asyncio.sleep(0.6)
        if scenario in ("steady", "wav"):  # 1 s of audio, then 0.4 s more within a few ms
            yield audio(1.0)
            for _ in range(4):
                await asyncio.sleep(0.01)
                yield audio(0.1)
        elif scenario == "late":  # 40 ms of audio, then a second's pause: a stall of about 0.96 s
            yield audio(0.04)
            await asyncio.sleep(1.0)
            yield audio(0.04)
        elif scenario == "mp3":  # 0.6 s of audio, a second's pause, 0.4 s more, encoded as ours are
            encoder = StreamEncoder("mp3")
            yield encoder.add(audio(0.6))
            await asyncio.sleep(1.0)
            yield encoder.add(audio(0.4)) + encoder.finish()
        elif scenario == "cut":  # the body breaks off: the server drops the connection, no last chunk
            yield audio(0.1)
            await asyncio.sleep(0.05)
            raise RuntimeError("the stream broke")

    return StreamingResponse(chunks(), media_type="audio/pcm")


async def models(request: Request):
    return JSONResponse({"object": "list", "data": [{"id": "fake-tts", "object": "model"}]})


async def health(request: Request):
    return JSONResponse({"status": "ok"})


async def voices(request: Request):
    form = await request.form()
    BODIES.append({"uploaded": form["name"], "bytes": len(await form["audio_sample"].read())})
    return JSONResponse({"success": True})


APP = Starlette(routes=[Route("/v1/audio/speech", speech, methods=["POST"]), Route("/v1/models", models),
                        Route("/health", health), Route("/v1/audio/voices", voices, methods=["POST"])])


@pytest.fixture(scope="module")
def server():
    with serving(APP) as url:
        yield url


@pytest.fixture
def plan():
    PLAN.clear()
    BODIES.clear()
    yield PLAN
    PLAN.clear()


def test_the_loop_records_a_stall_a_503_and_a_broken_body(server, plan):
    plan.extend(["steady", "late", "503", "cut", "steady"])

    async def measure() -> list[dict]:
        sink: list[dict] = []
        async with httpx.AsyncClient(trust_env=False) as client:
            await closed_loop(Speech(client, server, {"model": "fake-tts"}, timeout_s=30), 1, 5, sink)
        return sink

    steady, late, refused, cut, steady_again = asyncio.run(measure())  # one worker: the plan's order
    for r in (steady, steady_again):
        assert r["ok"] and r["status"] == 200 and r["stalls_s"] == [], r
        assert r["audio_s"] == pytest.approx(1.4) and 0 < r["headers_s"] <= r["ttfa_s"] <= r["total_s"]
        assert len(r["gaps_s"]) == len(r["chunks"]) - 1
    assert late["ok"] and late["audio_s"] == pytest.approx(0.08)
    assert len(late["stalls_s"]) == 1 and 0.5 < late["stalls_s"][0] < 10, late  # about 0.96 s
    assert max(late["gaps_s"]) > 0.5
    assert not refused["ok"] and refused["status"] == 503 and refused["error_kind"] == "status 503"
    assert "the engine is busy" in refused["error"] and refused["chunks"] == []
    assert not cut["ok"] and cut["status"] == 200 and cut["error_kind"] == "RemoteProtocolError", cut
    assert cut["audio_s"] == pytest.approx(0.1)  # what came before the break is recorded, as a failure

    figures = level_figures([steady, late, refused, cut, steady_again], slo_ttfa_s=5.0)
    assert (figures["ok"], figures["failed"], figures["good"]) == (3, 2, 2)
    assert figures["stall_rate"] == pytest.approx(1 / 3)
    assert figures["failures"] == {"status 503": 1, "RemoteProtocolError": 1}


def test_a_wav_header_is_not_audio(server, plan):
    plan.append("wav")

    async def measure() -> dict:
        sink: list[dict] = []
        async with httpx.AsyncClient(trust_env=False) as client:
            await Speech(client, server, {}, header_bytes=served.WAV_HEADER_BYTES, timeout_s=30).measure(
                time.perf_counter(), sink)
        return sink[0]

    r = asyncio.run(measure())
    assert r["ok"] and r["audio_s"] == pytest.approx(1.4)  # the 44 header bytes are not counted
    assert r["ttfa_s"] > 0.6 and r["ttfa_s"] - r["headers_s"] > 0.3  # TTFA waits for audio, past the header


def test_an_encoded_answer_counts_the_audio_its_chunks_decode_to(server, plan):
    """mp3 chunks: LAME holds its first frames back, so the first chunk decodes to less than the 0.6 s
    sent, the second (after a second's pause) to the rest and the flush; a stall, and the whole
    answer's audio within the encoder's priming and padding of the 1 s of PCM."""
    plan.append("mp3")

    async def measure() -> dict:
        sink: list[dict] = []
        async with httpx.AsyncClient(trust_env=False) as client:
            await Speech(client, server, {}, timeout_s=30, encoded=True).measure(time.perf_counter(), sink)
        return sink[0]

    r = asyncio.run(measure())
    assert r["ok"] and len(r["chunks"]) == 2 and r["encoded_bytes"] > 0 and "body" not in r
    first, second = (size / BYTES_PER_S for _, size in r["chunks"])
    assert 0.3 < first < 0.6 and second > 0.4, r["chunks"]
    assert 1.0 <= r["audio_s"] < 1.0 + 0.15  # priming (1105 samples) and the last frame's padding
    assert len(r["stalls_s"]) == 1 and r["stalls_s"][0] > 0.3, r


def test_a_run_against_a_base_url_writes_its_json_and_png(server, plan, tmp_path, capsys):
    argv = ["--base-url", server, "--concurrency", "1", "3", "--rate", "20", "--requests", "6", "--warmup", "1",
            "--max-tokens", "50", "--extra-body", '{"seed": 3}', "--out-dir", str(tmp_path)]
    assert served.main(argv) == 0
    results = json.loads((tmp_path / "served.json").read_text())
    assert (tmp_path / "served.png").read_bytes()[:8] == PNG_SIGNATURE
    assert results["target"] == {"base_url": server, "model": "fake-tts"}  # the model from GET /v1/models
    assert BODIES[0] == {"model": "fake-tts", "input": served.TEXT, "voice": "default", "response_format": "pcm",
                         "stream_format": "audio", "max_tokens": 50, "seed": 3}
    assert len(BODIES) == 1 + 3 * 6 and results["warmup"]["requests"] == 1
    assert [(lvl["kind"], lvl["load"], lvl["requests"], lvl["ok"]) for lvl in results["levels"]] == [
        ("closed", 1, 6, 6), ("closed", 3, 6, 6), ("open", 20.0, 6, 6)]
    assert all(len(lvl["records"]) == 6 and not lvl["timed_out"] for lvl in results["levels"])
    lines = capsys.readouterr().out.splitlines()
    assert sum(line.startswith(("closed c=", "open 20/s")) for line in lines) == 3


def test_a_level_past_its_time_limit_fails_the_run_and_keeps_its_requests(server, plan, tmp_path):
    plan.extend(["late"] * 4)
    argv = ["--base-url", server, "--model", "fake-tts", "--concurrency", "2", "--requests", "4", "--warmup", "0",
            "--level-timeout", "0.5", "--out-dir", str(tmp_path)]
    assert served.main(argv) == 1
    results = json.loads((tmp_path / "served.json").read_text())
    level, = results["levels"]
    assert level["timed_out"] and results["status"] == "a level ran past --level-timeout"
    assert level["requests"] == 2 and level["failures"] == {"cancelled at the level's time limit": 2}


def test_a_server_that_does_not_answer_fails_the_run(tmp_path):
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    assert served.main(["--base-url", url, "--concurrency", "1", "--out-dir", str(tmp_path)]) == 1
    results = json.loads((tmp_path / "served.json").read_text())
    assert results["status"].startswith("no server: GET") and results["levels"] == []
    assert not (tmp_path / "served.png").exists()


def test_a_serve_command_is_started_measured_and_stopped(tmp_path):
    """Another implementation's server, started as `--serve-command` says (here this module's fake
    one, by `python -m tests.test_benchmark_served PORT`) with the port filled in, is measured as
    a base URL would be, then stopped: nothing listens on its port afterwards."""
    argv = ["--serve-command", f"{sys.executable} -m tests.test_benchmark_served {{port}}", "--checkpoint", str(tmp_path),
            "--platform", "cpu", "--concurrency", "2", "--requests", "4", "--warmup", "0", "--out-dir", str(tmp_path)]
    assert served.main(argv) == 0, (tmp_path / "server.log").read_text()
    results = json.loads((tmp_path / "served.json").read_text())
    target = results["target"]
    port = int(target["command"][-1])
    assert target["command"][:3] == [sys.executable, "-m", "tests.test_benchmark_served"] and target["model"] == "fake-tts"
    assert target["boot_s"] > 0 and "max_tokens" not in results["body"]  # not ours: its own length limit
    assert [(lvl["requests"], lvl["ok"]) for lvl in results["levels"]] == [(4, 4)]
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0, trust_env=False)


def test_an_uploaded_voice_is_timed_spoken_once_alone_then_in_every_level(server, plan, tmp_path):
    voice = tmp_path / "me.wav"
    voice.write_bytes(b"RIFF" + b"\0" * 100)
    argv = ["--base-url", server, "--upload-voice", str(voice), "--concurrency", "2", "--requests", "4",
            "--warmup", "0", "--out-dir", str(tmp_path)]
    assert served.main(argv) == 0
    results = json.loads((tmp_path / "served.json").read_text())
    assert BODIES[0] == {"uploaded": "bench-voice", "bytes": 104} and results["voice_upload"]["upload_s"] > 0
    assert results["voice_first_use"]["requests"] == 1 and results["voice_first_use"]["ok"] == 1
    assert [b["voice"] for b in BODIES[1:]] == ["bench-voice"] * 5  # the first use, then the level's four


def test_base_url_and_serve_command_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        served.parse_args(["--base-url", "http://127.0.0.1:1", "--serve-command", "true"])
    assert "give one of them" in capsys.readouterr().err


if __name__ == "__main__":  # the fake server alone, on 127.0.0.1 and the port given
    uvicorn.run(APP, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="off")
