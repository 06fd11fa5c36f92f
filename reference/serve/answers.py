"""A speech answer's body: the bytes of a stream (raw, or OpenAI's SSE events) or of a whole clip,
in the requested format and speed, and the headers that describe them. A stream waits for its
chunks inside the server's stop (reference/serve/stop.py), which may cut it; a body that fails
after the status line ends unfinished, so no client takes it for a whole answer."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging

from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from reference.serve.audio import Usage
from reference.serve.encode import FORMATS, StreamEncoder, encode_whole, media_type
from reference.serve.stop import ServerStopping, Stop
from reference.serve.tempo import Tempo, stretch
from reference.serve.wav import SAMPLE_RATE, pcm16, wav_file, wav_header

logger = logging.getLogger("higgs_ref.serve")
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", **{name: f.media_type for name, f in FORMATS.items()}}
WHOLE_MEDIA_TYPES = {**MEDIA_TYPES, **{name: media_type(name, whole=True) for name in FORMATS}}
# Raw PCM has no header of its own: its answers describe it (a whole one too). The others' do.
PCM_HEADERS = {"pcm": {"X-Sample-Rate": str(SAMPLE_RATE), "X-Channels": "1", "X-Bit-Depth": "16"}}
# A streamed answer's headers say what its decoder will give (its container's header may still
# lack the length): the rate (Opus decoders give 48 kHz whatever rate was encoded), the channels,
# and the bits where the decoded samples are integers (the lossy decoders give floats).
DECODED = {"opus": {"X-Sample-Rate": "48000"}, **{f: {"X-Bit-Depth": "16"} for f in ("pcm", "wav", "flac")}}


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
        except ServerStopping:  # cut by the server's stop (reference/serve/stop.py): one line, no traceback
            logger.warning("a raw audio stream was cut: the server is stopping")
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


async def answer_bytes(first, chunks, fmt: str, speed: float = 1.0, stop: Stop | None = None):
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
        async for chunk in _chain(first, chunks, stop):
            if data := await passed(pcm16(chunk)):
                yield data
    if (tempo is not None or encoder is not None) and (data := await passed(b"", last=True)):
        yield data


def whole_answer(pcm: bytes, fmt: str, speed: float = 1.0) -> bytes:
    pcm = stretch(pcm, speed)
    if fmt in FORMATS:
        return encode_whole(fmt, pcm)
    return wav_file(pcm) if fmt == "wav" else pcm


_END = object()


async def _chain(first, chunks, stop: Stop | None = None):
    """`first`, then `chunks`; ServerStopping once the server's stop cuts the stream (its drain
    limit passed) while it waits for a chunk."""
    yield first
    while True:
        async with stop.cuttable() if stop is not None else contextlib.nullcontext():
            chunk = await anext(chunks, _END)
        if chunk is _END:
            return
        yield chunk


async def raw_answer(first, chunks, fmt: str, speed: float, stop: Stop | None = None):
    """Raw audio bytes. A failure after the status line ends the chunked body without its last
    chunk (ClosingStreamingResponse)."""
    try:
        async for data in answer_bytes(first, chunks, fmt, speed, stop):
            yield data
    finally:
        await chunks.aclose()


async def sse_answer(first, chunks, fmt: str, speed: float, usage: Usage, on_failure, stop: Stop | None = None):
    """OpenAI's speech events: `speech.audio.delta` with base64 audio (the bytes of the audio
    stream, WAV header first for wav), then `speech.audio.done` with the request's `usage`; a
    failure after the status line is an `error` event (`on_failure`'s error object, which also
    logs it), and no `speech.audio.done` follows it; so is the cut of the server's stop."""
    try:
        async for data in answer_bytes(first, chunks, fmt, speed, stop):
            yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
        yield _event({"type": "speech.audio.done", "usage": usage.openai()})
    except ServerStopping:
        logger.warning("an SSE stream was cut: the server is stopping")
        yield _event({"type": "error", "error": {"message": str(stop.cut_error()), "type": "server_stopping"}})
    except Exception as exc:
        yield _event({"type": "error", "error": on_failure(exc)})
    finally:
        await chunks.aclose()


def _event(data: dict) -> bytes:
    return f"data: {json.dumps(data)}\n\n".encode()
