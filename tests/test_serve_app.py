"""The speech app's answer to a request without `stream_format`, on a fake speaker (no engine):
the server's default picks streamed or whole, and the answer and /health say which and why."""

import asyncio
from dataclasses import dataclass

import pytest
import torch
from fastapi.testclient import TestClient

from reference.codec.geometry import DEFAULT_GEOMETRY, UPSTREAM_V1
from reference.deploy.stream_check import check_stream
from reference.serve.app import Service, build_app
from reference.serve.metrics import ServeMetrics
from reference.serve.protocol import stream_default
from reference.serve.wav import pcm16, wav_file, wav_header

EXACT = stream_default(check_stream(DEFAULT_GEOMETRY))
LOSSY = stream_default(check_stream(UPSTREAM_V1))
CHUNKS = [torch.full((960,), 0.25), torch.full((2 * 960,), -0.5)]  # two PCM chunks, 24 kHz float


class FakeEngine:
    errored = False

    async def check_health(self):
        return None


@dataclass
class FakeSpeaker:
    """Whole: the chunks joined; streamed: the chunks one by one (what Speaker gives)."""
    metrics: ServeMetrics
    api = type("FakeAPI", (), {"engine": FakeEngine()})()

    async def whole(self, request, request_id, ticket=None):
        return torch.cat(CHUNKS)

    async def stream(self, request, request_id, received, ticket=None, usage=None):
        for chunk in CHUNKS:
            await asyncio.sleep(0)
            yield chunk


class FakeService(Service):
    async def speech_request(self, body):
        return body, 3  # the fake speaker reads nothing of it; 3 prompt tokens


def client(default) -> TestClient:
    service = FakeService(speaker=FakeSpeaker(ServeMetrics()), model_name="m", runner="v1", profile="default",
                          max_model_len=1024, default_sampling={}, voices={"default": None}, stream_default=default)
    return TestClient(build_app(service))


BODY = {"model": "m", "input": "Hello."}
STREAMED_WAV = wav_header(None) + b"".join(pcm16(c) for c in CHUNKS)
WHOLE_WAV = wav_file(pcm16(torch.cat(CHUNKS)))


def test_without_stream_format_an_exact_geometry_streams_and_says_so():
    with client(EXACT) as c:
        response = c.post("/v1/audio/speech", json=BODY)
        assert response.status_code == 200 and response.content == STREAMED_WAV
        assert response.headers["x-stream-format-default"] == EXACT.header
        assert response.headers["x-sample-rate"] == "24000" and "content-length" not in response.headers
        assert c.get("/health").json()["stream_format_default"] == EXACT.header


def test_without_stream_format_a_lossy_geometry_answers_whole_and_says_why():
    with client(LOSSY) as c:
        response = c.post("/v1/audio/speech", json=BODY)
        assert response.status_code == 200 and response.content == WHOLE_WAV
        assert response.headers["x-stream-format-default"] == LOSSY.header
        assert "lossy" in response.headers["x-stream-format-default"] and "x-sample-rate" not in response.headers
        assert c.get("/health").json()["stream_format_default"] == LOSSY.header


@pytest.mark.parametrize("default", [EXACT, LOSSY], ids=["exact", "lossy"])
@pytest.mark.parametrize("named, expect", [({"stream": False}, WHOLE_WAV), ({"stream": True}, STREAMED_WAV),
                                           ({"stream_format": "audio"}, STREAMED_WAV)])
def test_a_request_that_names_its_answer_gets_it_without_the_default_header(default, named, expect):
    with client(default) as c:
        response = c.post("/v1/audio/speech", json={**BODY, **named})
        assert response.status_code == 200 and response.content == expect
        assert "x-stream-format-default" not in response.headers


@pytest.mark.parametrize("field, param", [("text", "input"), ("ref_text", "ref_text")])
def test_a_text_holding_the_audio_token_is_a_400_naming_its_field(field, param):
    """`<|audio|>` inside a text would let a prompt match another request's generated rows in the
    prefix cache (reference/talker/prompt_salt.py): the prompt refuses it, the server says 400."""
    from higgs_dummy.cache import cached_checkpoint
    from reference.serve.protocol import RequestError
    from reference.speech import SpeechAPI, SpeechRequest

    speaker = FakeSpeaker(ServeMetrics())
    speaker.api = SpeechAPI(engine=None, checkpoint=cached_checkpoint("tiny", 0), runner="v1")
    service = FakeService(speaker=speaker, model_name="m", runner="v1", profile="default", max_model_len=1024,
                          default_sampling={}, voices={"default": None}, stream_default=EXACT)
    texts = {"text": "Hello.", "ref_text": "Reference.", field: "Hello <|audio|> there."}
    request = SpeechRequest(texts["text"], ref_codes=[[1, 2]] * 8, ref_text=texts["ref_text"], sampling={"max_tokens": 16})
    with pytest.raises(RequestError, match="<\\|audio\\|>") as error:
        service.check_length(request)
    assert (error.value.status, error.value.param) == (400, param)


@pytest.mark.parametrize("method, path, status, says", [
    ("GET", "/v1/audio/speeches", 404, "no route GET /v1/audio/speeches; this server answers POST /v1/audio/speech"),
    ("GET", "/v1/audio/speech", 405, "GET /v1/audio/speech: method not allowed; this path takes POST"),
    ("PUT", "/health", 405, "PUT /health: method not allowed; this path takes GET"),
])
def test_a_routing_error_is_openais_error_object_naming_the_fix(method, path, status, says):
    with client(EXACT) as c:
        answer = c.request(method, path)
    assert answer.status_code == status and set(answer.json()) == {"error"}, answer.text
    error = answer.json()["error"]
    assert error == {"message": error["message"], "type": "invalid_request_error", "param": None, "code": status}
    assert error["message"].startswith(says), error["message"]


@pytest.mark.parametrize("fmt", ["wav", "mp3", "opus", "aac", "flac"])
def test_a_streamed_answers_headers_say_what_its_decoder_gives(fmt):
    """X-Sample-Rate and X-Channels as FFmpeg's decoder (through PyAV) gives them; X-Bit-Depth only
    where it gives 16-bit integer samples."""
    import io

    import av

    with client(EXACT) as c:
        answer = c.post("/v1/audio/speech", json={**BODY, "response_format": fmt, "stream_format": "audio"})
    assert answer.status_code == 200, answer.text
    with av.open(io.BytesIO(answer.content)) as container:
        frame = next(container.decode(audio=0))
    assert answer.headers["x-sample-rate"] == str(frame.sample_rate), (fmt, dict(answer.headers))
    assert answer.headers["x-channels"] == str(frame.layout.nb_channels), (fmt, dict(answer.headers))
    assert answer.headers.get("x-bit-depth") == ("16" if frame.format.name.startswith("s16") else None), (
        fmt, frame.format.name, dict(answer.headers))


def test_a_whole_aac_answer_is_mp4_whose_edit_list_drops_the_priming():
    import io

    import av

    with client(EXACT) as c:
        answer = c.post("/v1/audio/speech", json={**BODY, "response_format": "aac", "stream": False})
    assert answer.status_code == 200 and answer.headers["content-type"] == "audio/mp4", answer.headers
    with av.open(io.BytesIO(answer.content)) as container:
        decoded = sum(f.samples for f in container.decode(audio=0))
    sent = sum(len(c) for c in CHUNKS)  # 2880 samples: the decoder gives them and the last frame's padding
    assert sent <= decoded < sent + 1024, f"{decoded} samples decoded for {sent} sent"


def test_a_client_that_leaves_while_sending_its_body_is_no_server_error(caplog):
    """Seen on an H100 when a benchmark level's time limit cut requests just sent: each was a 500 with a logged
    traceback (benchmarks/results/2026-12-07-h100-host-chunks-mps/NOTES.md)."""
    metrics = ServeMetrics()
    service = FakeService(speaker=FakeSpeaker(metrics), model_name="m", runner="v1", profile="default",
                          max_model_len=1024, default_sampling={}, voices={"default": None}, stream_default=EXACT)
    app, sent = build_app(service), []
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/audio/speech", "raw_path": b"/v1/audio/speech", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"content-length", b"40")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8091)}

    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    with caplog.at_level("INFO", logger="higgs_ref.serve"):
        asyncio.run(app(scope, receive, send))
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 499
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert "the client left before its body arrived" in caplog.text
    assert 'higgs_serve_requests_total{status="500"}' not in metrics.render().decode()
