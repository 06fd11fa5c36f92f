"""The audio of one speech request, streamed or whole, over reference.speech.SpeechAPI.

Streamed: a producer task reads the engine's rows (SpeechAPI.stream_rows), turns them into frames
and PCM chunks with the profile's geometry (reference.codec.streaming.StreamingDecoder) and puts
them on a queue of `max_inflight_chunks` (the connector's setting: a slow client holds the
producer back). The response reads the queue. When the response ends early (the client
disconnected: Starlette cancels the response task, which closes its body iterator), it cancels
the producer; the cancellation reaches AsyncLLM.generate, which aborts the request in the engine,
and the producer aborts it once more by id (a no-op when already gone) before counting it in
`higgs_serve_requests_aborted_total`. The engine frees the request's KV blocks and the worker its
talker slot at its next step.

Whole: every row first, then one offline decode (Codec.decode), as the offline path does.
Decodes run in a thread, at most the codec stage's `max_num_seqs` at a time (the codec batch).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import torch

from reference.codec.geometry import StreamGeometry
from reference.codec.model import Codec
from reference.codec.streaming import StreamingDecoder
from reference.serve.metrics import ServeMetrics
from reference.speech import RowsToFrames, SpeechAPI, SpeechRequest, SpeechResult

logger = logging.getLogger("higgs_ref.serve")
_DONE = object()


class _Progress:
    """A request's place in the running / waiting gauges."""

    def __init__(self, metrics: ServeMetrics):
        self.metrics, self.state = metrics, "waiting"
        metrics.waiting.inc()

    def running(self) -> None:
        if self.state == "waiting":
            self.metrics.waiting.dec()
            self.metrics.running.inc()
            self.state = "running"

    def end(self) -> None:
        if self.state != "ended":
            (self.metrics.waiting if self.state == "waiting" else self.metrics.running).dec()
            self.state = "ended"


@dataclass
class Speaker:
    api: SpeechAPI
    codec: Codec
    geometry: StreamGeometry
    metrics: ServeMetrics
    codec_batch: int = 1  # the codec stage's max_num_seqs
    inflight_chunks: int = 2  # the connector's max_inflight_chunks

    def __post_init__(self):
        self._gate = asyncio.Semaphore(max(1, self.codec_batch))

    async def _decode(self, fn, *args):
        async with self._gate:
            return await asyncio.to_thread(fn, *args)

    async def whole(self, request: SpeechRequest, request_id: str) -> torch.Tensor:
        """Every row, then the offline decode of all frames. [T * 960] float"""
        progress, rows = _Progress(self.metrics), []
        try:
            async for new_rows in self.api.stream_rows(request, request_id):
                progress.running()
                rows.extend(new_rows)
            return await self._decode(self.codec.decode, SpeechResult(rows, [], None).frames)
        finally:
            progress.end()

    async def _produce(self, request: SpeechRequest, request_id: str, queue: asyncio.Queue) -> None:
        progress = _Progress(self.metrics)
        decoder, frames = StreamingDecoder(self.codec, self.geometry), RowsToFrames()
        rows = self.api.stream_rows(request, request_id)
        try:
            async for new_rows in rows:
                progress.running()
                for chunk in await self._decode(decoder.push, frames.add(new_rows)):
                    await queue.put(chunk)
            for chunk in await self._decode(decoder.finish):
                await queue.put(chunk)
            await queue.put(_DONE)
        except asyncio.CancelledError:
            await rows.aclose()
            await self.api.engine.abort(request_id)
            self.metrics.aborted.inc()
            raise
        except Exception as exc:  # the response reports it (the status line is already sent)
            logger.exception("speech request %s failed", request_id)
            await queue.put(exc)
        finally:
            progress.end()

    async def stream(self, request: SpeechRequest, request_id: str, received: float) -> AsyncIterator[torch.Tensor]:
        """PCM chunks (24 kHz float) as the geometry cuts them; closing the iterator early aborts."""
        queue: asyncio.Queue = asyncio.Queue(maxsize=max(1, self.inflight_chunks))
        producer = asyncio.create_task(self._produce(request, request_id, queue))
        producer.add_done_callback(_log_failure)
        done, first = False, True
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    done = True
                    return
                if isinstance(item, Exception):
                    raise item
                if first:
                    self.metrics.ttfa.observe(time.monotonic() - received)
                    first = False
                yield item
        finally:
            if not done:
                producer.cancel()  # the client left: abort the engine request


def _log_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("speech producer failed: %r", task.exception())
