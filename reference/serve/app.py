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
from collections.abc import Awaitable
from dataclasses import dataclass, field
from functools import partial

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect
from vllm.v1.engine.exceptions import EngineDeadError

from reference.serve.admission import Admission, Overloaded
from reference.serve.audio import Speaker, Usage
from reference.serve.encode import FORMATS, StreamEncoder, encode_whole
from reference.serve.metrics import ServeMetrics
from reference.serve.protocol import (DEFAULT_VOICE, Limits, RequestError, SpeechBody, StreamDefault, parse_json,
                                      parse_speech)
from reference.serve.tempo import Tempo, stretch
from reference.serve.voices import Voice, VoiceStore, decode_ref_audio
from reference.serve.wav import SAMPLE_RATE, pcm16, wav_file, wav_header
from reference.speech import SpeechRequest

logger = logging.getLogger("higgs_ref.serve")
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", **{name: f.media_type for name, f in FORMATS.items()}}
# Raw PCM has no header of its own: its answers describe it (a whole one too). The others' do.
PCM_HEADERS = {"pcm": {"X-Sample-Rate": str(SAMPLE_RATE), "X-Channels": "1", "X-Bit-Depth": "16"}}
ENGINE_WATCH_S = 0.05  # how often the watchdog asks whether the engine is alive (an attribute read)
# What a client and the log are told once the engine is dead (vLLM's own EngineDeadError points the
# reader at a stack trace "above", in a log the client cannot see).
ENGINE_DEAD = ("the talker engine is dead (its core process or its output loop stopped); the server exits so that "
               "its supervisor can restart it")


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
            raise RequestError(400, "voice", f"unknown voice {body.voice!r}; this server knows "
                                             f"{', '.join(sorted(self.voices))}")
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
    is the number of responses held back by their client.
    A body that fails after the status line goes to `on_failure` (the one log line) and the
    response returns unfinished: uvicorn closes the connection without the last chunk, so no client
    takes it for a finished answer, and its own line for that is dropped (`CutBodyLogged`)."""

    def __init__(self, content, *, sends_waiting, on_failure, **kwargs):
        super().__init__(content, **kwargs)
        self.sends_waiting, self.on_failure = sends_waiting, on_failure

    async def __call__(self, scope, receive, send):
        async def counted_send(message):
            with self.sends_waiting.track_inprogress():
                await send(message)

        try:
            await super().__call__(scope, receive, counted_send)
        except ClientDisconnect:
            raise
        except Exception as exc:
            self.on_failure(exc)
        finally:
            await self.body_iterator.aclose()


class CutBodyLogged(logging.Filter):
    """Drops uvicorn's error line for a response that returned unfinished: the app leaves a body
    unfinished only after logging its failure (ClosingStreamingResponse)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "ASGI callable returned without completing response."


CUT_BODY_LOGGED = CutBodyLogged()


async def _pcm(first, chunks, fmt: str, speed: float = 1.0):
    """The audio stream's bytes: the WAV header for wav, the first chunk, then the rest; at another
    `speed` through Rubber Band's stretcher, the compressed formats through their encoder (both in a
    thread: they release the GIL), each of which gives its last bytes when the stream ends."""
    if fmt == "wav":
        yield wav_header(None)
    tempo = Tempo(speed) if speed != 1.0 else None
    encoder = StreamEncoder(fmt) if fmt in FORMATS else None

    async def passed(pcm: bytes, last: bool = False) -> bytes:
        if tempo is not None:
            pcm = await asyncio.to_thread(tempo.add, pcm) + (await asyncio.to_thread(tempo.finish) if last else b"")
        if encoder is not None:
            encoded = await asyncio.to_thread(encoder.add, pcm) if pcm else b""
            return encoded + (await asyncio.to_thread(encoder.finish) if last else b"")
        return pcm

    if first is not None:
        async for chunk in _chain(first, chunks):
            if data := await passed(pcm16(chunk)):
                yield data
    if (tempo is not None or encoder is not None) and (data := await passed(b"", last=True)):
        yield data


def _whole_answer(pcm: bytes, fmt: str, speed: float = 1.0) -> bytes:
    pcm = stretch(pcm, speed)
    if fmt in FORMATS:
        return encode_whole(fmt, pcm)
    return wav_file(pcm) if fmt == "wav" else pcm


async def _chain(first, chunks):
    yield first
    async for chunk in chunks:
        yield chunk


async def _audio(first, chunks, fmt: str, speed: float):
    """Raw audio bytes. A failure after the status line ends the chunked body without its last
    chunk (ClosingStreamingResponse)."""
    try:
        async for data in _pcm(first, chunks, fmt, speed):
            yield data
    finally:
        await chunks.aclose()


async def _sse(first, chunks, fmt: str, speed: float, usage: Usage, on_failure):
    """OpenAI's speech events: `speech.audio.delta` with base64 audio (the bytes of the audio
    stream, WAV header first for wav), then `speech.audio.done` with the request's `usage`; a
    failure after the status line is an `error` event (`on_failure`'s error object, which also
    logs it), and no `speech.audio.done` follows it."""
    try:
        async for data in _pcm(first, chunks, fmt, speed):
            yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
        yield _event({"type": "speech.audio.done", "usage": usage.openai()})
    except Exception as exc:
        yield _event({"type": "error", "error": on_failure(exc)})
    finally:
        await chunks.aclose()


def _event(data: dict) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()


class EngineDead(Exception):
    """A request refused because the engine is dead: it arrived after the death, or was waiting
    for a talker slot or its first audio then."""


class ClientLeft(Exception):
    """The client disconnected before its answer started."""


async def _unless_client_leaves(request: Request, work: Awaitable):
    """`work`'s result, or ClientLeft once the client disconnects first: `work` is cancelled, so a
    request waiting for a talker slot leaves the line and one waiting for its first audio is
    aborted in the engine. (The body is read by now: the next ASGI message is the disconnect.)"""

    async def disconnected():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task, watcher = asyncio.ensure_future(work), asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    if task.cancelled():
        raise ClientLeft()
    return task.result()


async def _first(chunks):
    """The first PCM chunk, or None when the stream has none."""
    return await anext(chunks, None)


async def watch_engine(engine, on_engine_dead, every_s: float = ENGINE_WATCH_S) -> None:
    """Calls `on_engine_dead()` once the engine is dead (its core process gone or its output
    loop ended), even while no request is in flight."""
    while not engine.errored:
        await asyncio.sleep(every_s)
    logger.error(ENGINE_DEAD)
    on_engine_dead()


class EngineWatch:
    """Whether the talker engine is dead, known from its first sign (vLLM's `errored`, or a
    request that met vLLM's EngineDeadError) and for good: /health and every request ask this.
    Knowing it turns away every request waiting for a talker slot, at once, with the dead-engine
    503. `errored` is `dead()`, for the watchdog."""

    def __init__(self, engine, admission: Admission | None):
        self.engine, self.admission, self.known = engine, admission, False

    @property
    def errored(self) -> bool:
        return self.dead()

    def dead(self, exc: BaseException | None = None) -> bool:
        if not self.known and (self.engine.errored or isinstance(exc, EngineDeadError)):
            self.known = True
            if self.admission is not None:
                self.admission.refuse_all(EngineDead)
        return self.known


def build_app(service: Service, on_startup=None, on_shutdown=None, on_engine_dead=None) -> FastAPI:
    """The app; `on_startup` (awaited before the first request: raising fails the start),
    `on_shutdown` (called when the server stops, also after a failed start) and `on_engine_dead`
    (called once when the engine dies while the app serves: the server's exit)."""
    from contextlib import asynccontextmanager

    watch = EngineWatch(service.api.engine, service.admission)

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
        logger.error("speech request %s failed after its first audio", request_id, exc_info=exc)
        return {"message": f"{type(exc).__name__}: {exc}", "type": "server_error"}

    @app.exception_handler(EngineDead)
    async def dead(request: Request, exc: EngineDead):
        return engine_dead()

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception):
        """A failure before the answer started: 503 naming the cause when the engine is dead, else 500."""
        if watch.dead(exc):
            return engine_dead()
        logger.exception("request failed")
        metrics.responses.labels("500").inc()
        body = {"error": {"message": f"{type(exc).__name__}: {exc}", "type": "server_error", "param": None,
                          "code": 500}}
        return JSONResponse(body, status_code=500)

    @app.get("/health")
    async def health():
        if watch.dead():  # not ready, from the first sign of the death on
            return JSONResponse({"status": "unhealthy", "error": ENGINE_DEAD}, status_code=503)
        return {"status": "ok", "runner": service.runner, "profile": service.profile,
                "stream_format_default": service.stream_default.header}

    @app.post("/v1/audio/voices")
    async def upload_voice(request: Request):
        """vllm-omni's upload: a multipart form with the WAV `audio_sample`, its `name` and an
        optional `ref_text`; encoded at once, so no request pays for it."""
        store = service.store or VoiceStore(service.voices)  # without a folder: refused naming --voices
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > store.max_bytes + (64 << 10):
            raise RequestError(413, "audio_sample", f"the upload is {declared} bytes, over the limit of "
                                                    f"{store.max_bytes} bytes for 'audio_sample'")
        form = await request.form(max_files=1, max_fields=2)
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
        raw = await _read_body(request, service.limits.max_body_bytes)
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
                ticket = await _unless_client_leaves(request, service.admission.admit())
            if body.stream_format is None:
                audio = await _unless_client_leaves(request, service.speaker.whole(speech_request, request_id, ticket))
                answer = await asyncio.to_thread(_whole_answer, pcm16(audio), body.response_format, body.speed)
                metrics.responses.labels("200").inc()
                return Response(answer, media_type=media, headers={**PCM_HEADERS.get(body.response_format, {}), **chosen})
            chunks = service.speaker.stream(speech_request, request_id, received, ticket, usage)
            try:
                first = await _unless_client_leaves(request, _first(chunks))
            except BaseException:
                await chunks.aclose()
                raise
        except BaseException as exc:
            if ticket is not None:  # also when the stream was closed before it started
                ticket.release()
            if isinstance(exc, ClientLeft):
                return Response(status_code=499)  # nobody reads it; the work was cancelled
            if isinstance(exc, Exception) and watch.dead(exc):  # waiting for a slot or the first audio
                logger.warning("speech request %s ended before its first audio: the talker engine is dead", request_id)
                raise EngineDead() from None
            raise
        metrics.responses.labels("200").inc()
        failed = partial(stream_failed, request_id)
        if body.stream_format == "sse":
            return ClosingStreamingResponse(_sse(first, chunks, body.response_format, body.speed, usage, failed),
                                            media_type="text/event-stream", sends_waiting=metrics.sends_waiting,
                                            on_failure=failed)
        described = {"X-Sample-Rate": str(SAMPLE_RATE), **PCM_HEADERS.get(body.response_format, {}), **chosen}
        return ClosingStreamingResponse(_audio(first, chunks, body.response_format, body.speed), media_type=media,
                                        headers=described, sends_waiting=metrics.sends_waiting, on_failure=failed)

    return app

