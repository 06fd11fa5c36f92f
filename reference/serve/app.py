"""The FastAPI app: `POST /v1/audio/speech`, `GET /v1/models`, `GET /health`, `GET /metrics`.

Every client error is a 4xx with OpenAI's error body naming the field (`error.param`); anything
else is a 500 with a JSON body, logged. The input limit: the prompt (markup, voice reference and
the input's tokens) plus the request's `max_tokens` must fit the talker's `max_model_len`, so the
stream can always run to its end (vLLM would refuse a longer prompt, and stop a longer
generation at max_model_len: audio cut short without an error).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
import uuid
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from reference.serve.audio import Speaker
from reference.serve.metrics import ServeMetrics
from reference.serve.protocol import (DEFAULT_VOICE, Limits, RequestError, SpeechBody, StreamDefault, parse_json,
                                      parse_speech)
from reference.serve.voices import Voice, decode_ref_audio
from reference.serve.wav import SAMPLE_RATE, pcm16, wav_file, wav_header
from reference.speech import SpeechRequest

logger = logging.getLogger("higgs_ref.serve")
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm"}


@dataclass
class Service:
    speaker: Speaker
    model_name: str
    runner: str
    profile: str
    max_model_len: int
    default_sampling: dict
    voices: dict[str, Voice]
    stream_default: StreamDefault  # what a request without stream_format gets (the profile's geometry)
    limits: Limits = field(default_factory=Limits)
    _voice_codes: dict = field(default_factory=dict)

    @property
    def api(self):
        return self.speaker.api

    @property
    def metrics(self) -> ServeMetrics:
        return self.speaker.metrics

    async def _codes(self, body: SpeechBody):
        """The reference's codec codes [8, T], or None for the zero-shot voice."""
        if body.ref_audio is not None:
            samples, rate = decode_ref_audio(body.ref_audio, self.limits.max_ref_audio_seconds)
        elif body.voice != DEFAULT_VOICE:
            if body.voice not in self._voice_codes:
                v = self.voices[body.voice]
                probe = SpeechRequest("-", ref_audio=v.samples, ref_sample_rate=v.sample_rate)
                self._voice_codes[body.voice] = await asyncio.to_thread(self.api.reference_codes, probe)
            return self._voice_codes[body.voice]
        else:
            return None
        return await asyncio.to_thread(self.api.reference_codes, SpeechRequest("-", ref_audio=samples,
                                                                               ref_sample_rate=rate))

    async def speech_request(self, body: SpeechBody) -> SpeechRequest:
        codes = await self._codes(body)
        ref_text = body.ref_text
        if ref_text is None and body.voice != DEFAULT_VOICE:
            ref_text = self.voices[body.voice].ref_text
        sampling = {**self.default_sampling, **body.sampling}
        request = SpeechRequest(body.text, ref_codes=codes, ref_text=ref_text if codes is not None else None,
                                sampling=sampling)
        self.check_length(request)
        return request

    def check_length(self, request: SpeechRequest) -> None:
        max_tokens = int(request.sampling.get("max_tokens") or self.api.default_max_tokens)
        try:
            prompt_tokens = len(self.api.prompt(request).token_ids)
        except ValueError as exc:  # a text the prompt layout refuses, e.g. one holding <|audio|>
            raise RequestError(400, "ref_text" if str(exc).startswith("ref_text") else "input", str(exc)) from None
        text_tokens = len(self.api.tokenizer.encode(request.text, add_special_tokens=False))
        around = prompt_tokens - text_tokens  # markup and the voice reference's slots
        limit = self.max_model_len - max_tokens - around
        where = f"max_model_len {self.max_model_len} of profile {self.profile}"
        if limit < 1:
            raise RequestError(400, "max_tokens", f"max_tokens {max_tokens} leaves no room for the input: the "
                                                  f"prompt ({around} tokens besides the input) plus max_tokens must fit {where}")
        if text_tokens > limit:
            raise RequestError(400, "input", f"'input' is {text_tokens} tokens, over the limit of {limit} tokens for "
                                             f"this request: the prompt ({around} tokens besides the input) plus "
                                             f"max_tokens ({max_tokens}) must fit {where}")


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, "body", f"the request body is {declared} bytes, over the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, "body", f"the request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class ClosingStreamingResponse(StreamingResponse):
    """Closes its body iterator when the response ends, however it ends. Under uvicorn (ASGI 2.3)
    Starlette watches for the disconnect and cancels the response, and anyio delivers that
    cancellation where the task next waits: inside the iterator, once uvicorn has let a waiting
    send return, so the iterator closes itself. A server whose send raises once the client is gone
    (ASGI 2.4) leaves the iterator suspended at its yield instead; then only this close (or the
    garbage collector, some time later) reaches the engine.
    `sends_waiting` counts the sends in progress: the server's send returns at once unless the
    client's socket and the transport's buffer are full, so at a scrape (same event loop) the gauge
    is the number of responses held back by their client."""

    def __init__(self, content, *, sends_waiting, **kwargs):
        super().__init__(content, **kwargs)
        self.sends_waiting = sends_waiting

    async def __call__(self, scope, receive, send):
        async def counted_send(message):
            with self.sends_waiting.track_inprogress():
                await send(message)

        try:
            await super().__call__(scope, receive, counted_send)
        finally:
            await self.body_iterator.aclose()


async def _audio(chunks, fmt: str):
    try:
        if fmt == "wav":
            yield wav_header(None)
        async for chunk in chunks:
            yield pcm16(chunk)
    finally:
        await chunks.aclose()


async def _sse(chunks, fmt: str):
    """OpenAI's speech events: `speech.audio.delta` with base64 audio (the bytes of the audio
    stream, WAV header first for wav), then `speech.audio.done`."""
    try:
        if fmt == "wav":
            yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(wav_header(None)).decode()})
        async for chunk in chunks:
            yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(pcm16(chunk)).decode()})
        yield _event({"type": "speech.audio.done"})
    finally:
        await chunks.aclose()


def _event(data: dict) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


def build_app(service: Service, on_startup=None, on_shutdown=None) -> FastAPI:
    """The app; `on_startup` (awaited before the first request: raising fails the start) and
    `on_shutdown` (called when the server stops, also after a failed start)."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        try:
            if on_startup is not None:
                await on_startup()
            yield
        finally:
            if on_shutdown is not None:
                on_shutdown()

    app = FastAPI(title="Higgs Audio v3 reference speech server", lifespan=lifespan)
    metrics = service.metrics

    @app.exception_handler(RequestError)
    async def client_error(request: Request, exc: RequestError):
        metrics.responses.labels(str(exc.status)).inc()
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception):
        logger.exception("request failed")
        metrics.responses.labels("500").inc()
        body = {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "server_error", "param": None,
                          "code": 500}}
        return JSONResponse(body, status_code=500)

    @app.get("/health")
    async def health():
        try:
            await service.api.engine.check_health()
        except Exception as exc:  # the engine is dead: not ready
            return JSONResponse({"status": "unhealthy", "error": str(exc)}, status_code=503)
        return {"status": "ok", "runner": service.runner, "profile": service.profile,
                "stream_format_default": service.stream_default.header}

    @app.get("/v1/models")
    async def models():
        card = {"id": service.model_name, "object": "model", "created": 0, "owned_by": "higgs-reference",
                "max_model_len": service.max_model_len}
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def prometheus():
        metrics.slots.set(sum(await service.api.engine.collective_rpc("talker_open_requests")))
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        received = time.monotonic()
        raw = await _read_body(request, service.limits.max_body_bytes)
        body = parse_speech(parse_json(raw), model_name=service.model_name, voices=service.voices,
                            runner=service.runner, limits=service.limits, stream_default=service.stream_default)
        speech_request = await service.speech_request(body)
        request_id = f"speech-{uuid.uuid4().hex}"
        media = MEDIA_TYPES[body.response_format]
        # An answer the server's default chose says so, and why (the profile's geometry).
        chosen = {} if body.stream_default is None else {"X-Stream-Format-Default": body.stream_default.header}
        if body.stream_format is None:
            pcm = pcm16(await service.speaker.whole(speech_request, request_id))
            metrics.responses.labels("200").inc()
            return Response(wav_file(pcm) if body.response_format == "wav" else pcm, media_type=media, headers=chosen)
        chunks = service.speaker.stream(speech_request, request_id, received)
        metrics.responses.labels("200").inc()
        if body.stream_format == "sse":
            return ClosingStreamingResponse(_sse(chunks, body.response_format), media_type="text/event-stream",
                                            sends_waiting=metrics.sends_waiting)
        return ClosingStreamingResponse(_audio(chunks, body.response_format), media_type=media,
                                        headers={"X-Sample-Rate": str(SAMPLE_RATE), **chosen},
                                        sends_waiting=metrics.sends_waiting)

    return app

