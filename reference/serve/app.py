"""The FastAPI app: `POST /v1/audio/speech`, `GET /v1/models`, `GET /health`, `GET /metrics`.

Every client error is a 4xx with OpenAI's error body naming the field (`error.param`); anything
else is a 500 with a JSON body, logged. The input limit: the prompt (markup, voice reference and
the input's tokens) plus the request's `max_tokens` must fit the talker's `max_model_len`, so the
stream can always run to its end (vLLM would refuse a longer prompt, and stop a longer
generation at max_model_len: audio cut short without an error).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from reference.serve.admission import Admission, Overloaded
from reference.serve.answers import (CUT_BODY_LOGGED, DECODED, MEDIA_TYPES, PCM_HEADERS, WHOLE_MEDIA_TYPES,
                                     ClosingStreamingResponse, raw_answer, sse_answer, whole_answer)
from reference.serve.audio import Speaker, Usage
from reference.serve.lifecycle import (ENGINE_DEAD, ClientLeft, EngineDead, EngineWatch, first_chunk,
                                       unless_client_leaves, watch_engine)
from reference.serve.metrics import ServeMetrics
from reference.serve.protocol import (DEFAULT_VOICE, Limits, RequestError, SpeechBody, StreamDefault, known_voices,
                                      parse_json, parse_speech)
from reference.serve.request_body import limited_upload, read_body
from reference.serve.stop import ServerStopping, Stop
from reference.serve.voices import Voice, VoiceStore, decode_ref_audio
from reference.serve.wav import SAMPLE_RATE, pcm16
from reference.speech import EngineAborted, SpeechRequest

logger = logging.getLogger("higgs_ref.serve")
ROUTES = ("POST /v1/audio/speech, GET|POST /v1/audio/voices, DELETE /v1/audio/voices/NAME, GET /v1/models, "
          "GET /health, GET /metrics")

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
    admission: Admission | None = None  # the profile's serving limits (None: every request goes to the engine)
    store: VoiceStore | None = None  # uploads go to its folder (None: the voices are read-only)
    _voice_codes: dict = field(default_factory=dict)  # digest -> codes

    @property
    def api(self):
        return self.speaker.api

    @property
    def metrics(self) -> ServeMetrics:
        return self.speaker.metrics

    async def voice_codes(self, voice: Voice) -> torch.Tensor:
        """A named voice's codes [8, T]: encoded once per digest, kept in memory and in the store's
        folder (a restart reads them back instead of encoding again)."""
        if voice.digest not in self._voice_codes:
            stored = self.store.stored_codes(voice) if self.store is not None else None
            if stored is not None:
                codes = torch.from_numpy(stored)
            else:
                probe = SpeechRequest("-", ref_audio=voice.samples, ref_sample_rate=voice.sample_rate)
                codes = await asyncio.to_thread(self.api.reference_codes, probe)
                if self.store is not None:
                    await asyncio.to_thread(self.store.keep_codes, voice, codes.cpu().numpy())
            self._voice_codes[voice.digest] = codes
        return self._voice_codes[voice.digest]

    async def _codes(self, body: SpeechBody, voice: Voice | None):
        """The reference's codec codes [8, T], or None for the zero-shot voice."""
        if body.ref_audio is not None:
            samples, rate = decode_ref_audio(body.ref_audio, self.limits.max_ref_audio_seconds)
            return await asyncio.to_thread(self.api.reference_codes, SpeechRequest("-", ref_audio=samples,
                                                                                   ref_sample_rate=rate))
        return None if voice is None else await self.voice_codes(voice)

    async def speech_request(self, body: SpeechBody) -> tuple[SpeechRequest, int]:
        """The request for the speech API, and its prompt's length in tokens (OpenAI's usage). The
        named voice is taken once, before any wait: replaced or deleted meanwhile, this request
        keeps the one it began with."""
        voice = self.voices.get(body.voice) if body.voice != DEFAULT_VOICE else None
        if body.voice != DEFAULT_VOICE and voice is None:  # deleted since the body was read
            raise RequestError(400, "voice", f"unknown voice {body.voice!r}; {known_voices(self.voices)}")
        codes = await self._codes(body, voice)
        ref_text = body.ref_text if body.ref_text is not None or voice is None else voice.ref_text
        sampling = {**self.default_sampling, **body.sampling}
        request = SpeechRequest(body.text, ref_codes=codes, ref_text=ref_text if codes is not None else None,
                                sampling=sampling)
        return request, self.check_length(request)

    def check_length(self, request: SpeechRequest) -> int:
        """The prompt's length in tokens, after checking that it and max_tokens fit max_model_len."""
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
        return prompt_tokens


def build_app(service: Service, on_startup=None, on_shutdown=None, on_engine_dead=None, stop: Stop | None = None
              ) -> FastAPI:
    """The app; `on_startup` (awaited before the first request: raising fails the start),
    `on_shutdown` (called when the server stops, also after a failed start), `on_engine_dead`
    (called once when the engine dies while the app serves: the server's exit) and `stop` (the
    graceful stop's state, reference/serve/stop.py; GracefulServer drives it)."""
    watch = EngineWatch(service.api.engine, service.admission)
    stop = stop if stop is not None else Stop(0.0)
    stop.admission = service.admission

    @asynccontextmanager
    async def lifespan(app):
        watchdog = None
        try:
            if on_startup is not None:
                await on_startup()
            logging.getLogger("uvicorn.error").addFilter(CUT_BODY_LOGGED)
            watchdog = asyncio.create_task(watch_engine(watch, on_engine_dead or (lambda: None)))
            yield
        finally:
            if watchdog is not None:
                watchdog.cancel()
            if on_shutdown is not None:
                on_shutdown()

    app = FastAPI(title="Higgs Audio v3 reference speech server", lifespan=lifespan)
    metrics = service.metrics

    @app.exception_handler(RequestError)
    async def client_error(request: Request, exc: RequestError):
        metrics.responses.labels(str(exc.status)).inc()
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(StarletteHTTPException)
    async def routing_error(request: Request, exc: StarletteHTTPException):
        """Starlette's own errors (no such route, a method the route does not take, a malformed
        form) in OpenAI's error shape, as every other error."""
        metrics.responses.labels(str(exc.status_code)).inc()
        where = f"{request.method} {request.url.path}"
        allowed = {k.lower(): v for k, v in (exc.headers or {}).items()}.get("allow", "another method")
        message = {404: f"no route {where}; this server answers {ROUTES}",
                   405: f"{where}: method not allowed; this path takes {allowed}"
                   }.get(exc.status_code, f"{where}: {exc.detail}")
        body = {"error": {"message": message, "type": "invalid_request_error" if exc.status_code < 500 else
                          "server_error", "param": None, "code": exc.status_code}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_path(request: Request, exc: RequestValidationError):
        metrics.responses.labels("422").inc()
        first = exc.errors()[0] if exc.errors() else {}
        param = str(first.get("loc", ["", "request"])[-1])
        body = {"error": {"message": f"'{param}': {first.get('msg', 'invalid')}", "type": "invalid_request_error",
                          "param": param, "code": 422}}
        return JSONResponse(body, status_code=422)

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, exc: Overloaded):
        metrics.responses.labels("503").inc()
        return JSONResponse(exc.body(), status_code=503, headers={"Retry-After": str(exc.retry_after_s)})

    def engine_dead() -> JSONResponse:
        metrics.responses.labels("503").inc()
        return JSONResponse({"error": {"message": ENGINE_DEAD, "type": "engine_dead", "param": None, "code": 503}},
                            status_code=503)

    def stream_failed(request_id: str, exc: Exception) -> dict:
        """A stream that failed after its first audio: its log line, and the error for the client
        (SSE's `error` event). The engine's death is one line; anything else a defect, with its
        traceback."""
        if watch.dead(exc):
            logger.warning("speech request %s cut after its first audio: the talker engine is dead", request_id)
            return {"message": ENGINE_DEAD, "type": "engine_dead"}
        if isinstance(exc, EngineAborted):
            logger.warning("speech request %s cut after its first audio: %s", request_id, exc)
            return {"message": str(exc), "type": "engine_aborted"}
        logger.error("speech request %s failed after its first audio", request_id, exc_info=exc)
        return {"message": f"{type(exc).__name__}: {exc}", "type": "server_error"}

    @app.exception_handler(ClientDisconnect)
    async def client_left(request: Request, exc: ClientDisconnect):
        """The client left while sending its body (a speech request or an upload): nothing was started for it
        and nobody reads an answer; not a server error."""
        logger.info("%s %s: the client left before its body arrived", request.method, request.url.path)
        return Response(status_code=499)

    @app.exception_handler(EngineDead)
    async def dead(request: Request, exc: EngineDead):
        return engine_dead()

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception):
        """A failure before the answer started: 503 naming the cause when the engine is dead or
        aborted the request, else 500."""
        if watch.dead(exc):
            return engine_dead()
        if isinstance(exc, EngineAborted):  # the engine stopping: no audio yet, nothing to cut
            logger.warning("%s", exc)
            metrics.responses.labels("503").inc()
            return JSONResponse({"error": {"message": str(exc), "type": "engine_aborted", "param": None, "code": 503}},
                                status_code=503)
        logger.exception("request failed")
        metrics.responses.labels("500").inc()
        body = {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "server_error", "param": None,
                          "code": 500}}
        return JSONResponse(body, status_code=500)

    @app.get("/health")
    async def health():
        if watch.dead():  # not ready, from the first sign of the death on
            return JSONResponse({"status": "unhealthy", "error": ENGINE_DEAD}, status_code=503)
        if stop.stopping:
            return JSONResponse({"status": "stopping"}, status_code=503,
                                headers={"Retry-After": str(stop.retry_after_s)})
        return {"status": "ok", "runner": service.runner, "profile": service.profile,
                "stream_format_default": service.stream_default.header}

    @app.post("/v1/audio/voices")
    async def upload_voice(request: Request):
        """vllm-omni's upload: a multipart form with the WAV `audio_sample`, its `name` and an
        optional `ref_text`; encoded at once, so no request pays for it."""
        store = service.store or VoiceStore(service.voices)  # without a folder: refused naming --voices
        form = await limited_upload(request, store.max_bytes + (64 << 10), store.max_bytes).form(max_files=1, max_fields=2)
        try:
            return await _upload(store, form)
        finally:
            await form.close()

    async def _upload(store: VoiceStore, form):
        unknown = sorted(set(form) - {"audio_sample", "name", "ref_text"})
        if unknown:
            raise RequestError(400, unknown[0], f"unknown field {unknown[0]!r}: an upload takes audio_sample (a WAV "
                                                "file), name and ref_text")
        audio = form.get("audio_sample")
        if audio is None or isinstance(audio, str):
            raise RequestError(400, "audio_sample", "'audio_sample' is required: a WAV file, as a multipart file")
        data = await audio.read(store.max_bytes + 1)
        ref_text = form.get("ref_text")
        voice = await store.upload(form.get("name"), data, ref_text if isinstance(ref_text, str) else None)
        await service.voice_codes(voice)
        return {"success": True, "voice": next(v for v in store.listing()["uploaded_voices"] if v["name"] == voice.name)}

    @app.get("/v1/audio/voices")
    async def list_voices():
        return (service.store or VoiceStore(service.voices)).listing()

    @app.delete("/v1/audio/voices/{name}")
    async def delete_voice(name: str):
        await (service.store or VoiceStore(service.voices)).delete(name)
        return {"success": True, "message": f"Voice '{name}' deleted"}

    @app.get("/v1/models")
    async def models():
        card = {"id": service.model_name, "object": "model", "created": 0, "owned_by": "higgs-reference",
                "max_model_len": service.max_model_len}
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def prometheus():
        if not watch.dead():  # a dead engine answers no RPC: the gauge keeps its last value
            metrics.slots.set(sum(await service.api.engine.collective_rpc("talker_open_requests")))
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        """The status goes out with the first audio: everything that can fail before it (the body,
        the queue, the engine taking the request and making its first chunk) is a 4xx or 5xx."""
        received = time.monotonic()
        if watch.dead():
            raise EngineDead()
        if stop.stopping:
            raise stop.refusal()
        raw = await read_body(request, service.limits.max_body_bytes)
        body = parse_speech(parse_json(raw), model_name=service.model_name, voices=service.voices,
                            runner=service.runner, limits=service.limits, stream_default=service.stream_default)
        speech_request, prompt_tokens = await service.speech_request(body)
        usage = Usage(input_tokens=prompt_tokens)
        request_id = f"speech-{uuid.uuid4().hex}"
        media = MEDIA_TYPES[body.response_format]
        # An answer the server's default chose says so, and why (the profile's geometry).
        chosen = {} if body.stream_default is None else {"X-Stream-Format-Default": body.stream_default.header}
        ticket = None  # the talker slot: the speaker gives it back when the engine's work ends
        try:
            if service.admission is not None:
                ticket = await unless_client_leaves(request, service.admission.admit(), stop)
            if body.stream_format is None:
                audio = await unless_client_leaves(request, service.speaker.whole(speech_request, request_id, ticket),
                                                    stop)
                answer = await asyncio.to_thread(whole_answer, pcm16(audio), body.response_format, body.speed)
                metrics.responses.labels("200").inc()
                return Response(answer, media_type=WHOLE_MEDIA_TYPES[body.response_format],
                                headers={**PCM_HEADERS.get(body.response_format, {}), **chosen})
            chunks = service.speaker.stream(speech_request, request_id, received, ticket, usage)
            try:
                first = await unless_client_leaves(request, first_chunk(chunks), stop)
            except BaseException:
                await chunks.aclose()
                raise
        except BaseException as exc:
            if ticket is not None:  # also when the stream was closed before it started
                ticket.release()
            if isinstance(exc, ClientLeft):
                return Response(status_code=499)  # nobody reads it; the work was cancelled
            if isinstance(exc, ServerStopping):  # the drain limit passed before its first audio
                raise stop.refusal() from None
            if isinstance(exc, Exception) and watch.dead(exc):  # waiting for a slot or the first audio
                logger.warning("speech request %s ended before its first audio: the talker engine is dead", request_id)
                raise EngineDead() from None
            raise
        metrics.responses.labels("200").inc()
        failed = partial(stream_failed, request_id)
        if body.stream_format == "sse":
            return ClosingStreamingResponse(sse_answer(first, chunks, body.response_format, body.speed, usage, failed, stop),
                                            media_type="text/event-stream", sends_waiting=metrics.sends_waiting,
                                            on_failure=failed)
        described = {"X-Sample-Rate": str(SAMPLE_RATE), "X-Channels": "1", **DECODED.get(body.response_format, {}),
                     **chosen}
        return ClosingStreamingResponse(raw_answer(first, chunks, body.response_format, body.speed, stop),
                                        media_type=media,
                                        headers=described, sends_waiting=metrics.sends_waiting, on_failure=failed)

    return app

