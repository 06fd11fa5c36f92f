"""The audio of one speech request, streamed or whole, over reference.speech.SpeechAPI.

Streamed: the request's frames (SpeechAPI.stream_rows, then RowsToFrames) feed the engine's
code2wav stage (reference/codec/stage.py, the profile's geometry, codec batch and
`max_inflight_chunks`: a slow client holds its stream's producer back), and the response takes the
PCM chunks in order. When the response ends early (the client disconnected: Starlette cancels the
response task, which closes its body iterator), the stage cancels the stream's feeder; the
cancellation reaches AsyncLLM.generate, which aborts the request in the engine, and the frame
source aborts it once more by id (a no-op when already gone) before counting it in
`higgs_serve_requests_aborted_total`. The engine frees the request's KV blocks and the worker its
talker slot at its next step.

Whole: every row first, then one offline decode of all frames by the same stage.

Either way each request's rows go to the talker's pace (`Speaker.pace`, reference/serve/pace.py:
a meter per request; a stream asks for its next rows once the stage took its frames), which the
admission's pace gate reads (reference/serve/admission.py) and `/metrics` shows
(`higgs_serve_talker_steps_per_second`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import torch

from reference.serve.admission import Ticket
from reference.serve.metrics import ServeMetrics
from reference.serve.pace import Pace
from reference.speech import RowsToFrames, SpeechAPI, SpeechRequest, SpeechResult


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
class Usage:
    """OpenAI's usage of a speech request: the prompt's tokens in, the talker's rows out (one per
    40 ms codec step; the end-of-speech step carries no audio and is not counted)."""

    input_tokens: int
    output_tokens: int = 0

    def openai(self) -> dict:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "total_tokens": self.input_tokens + self.output_tokens}


@dataclass
class Speaker:
    api: SpeechAPI  # with its code2wav stage (SpeechAPI.stage)
    metrics: ServeMetrics
    pace: Pace = field(default_factory=Pace)  # the talker's steps a second, from every request's rows

    def __post_init__(self):
        self.metrics.show_pace(self.pace)
        self.api.stage.on_first_chunk = self.metrics.first_decode.observe

    async def whole(self, request: SpeechRequest, request_id: str, ticket: Ticket | None = None) -> torch.Tensor:
        """Every row, then the offline decode of all frames. [T * 960] float"""
        progress, rows, meter = _Progress(self.metrics), [], self.pace.meter()
        try:
            try:
                async for new_rows in self.api.stream_rows(request, request_id):
                    meter.rows(len(new_rows))
                    progress.running()
                    rows.extend(new_rows)
                    meter.asking()
            finally:
                meter.end()
                _release(ticket)  # the engine's work is done: the talker slot goes to the next request
            return await self.api.stage.decode(SpeechResult(rows, [], None).frames)
        finally:
            progress.end()

    async def _frames(self, request: SpeechRequest, request_id: str, progress: _Progress, ticket: Ticket | None,
                      usage: Usage | None):
        """The request's real frames [8, n]; ended early (closed or cancelled), it aborts and counts.
        Its talker slot (`ticket`) is given back when its engine request ends, however it ends."""
        rows, frames, ended = self.api.stream_rows(request, request_id), RowsToFrames(), False
        meter = self.pace.meter()
        try:
            async for new_rows in rows:
                meter.rows(len(new_rows))
                progress.running()
                if usage is not None:
                    usage.output_tokens += len(new_rows)
                yield frames.add(new_rows)
                meter.asking()  # the stage took the frames; how long it held this source shows here
            ended = True
        except Exception:  # the response reports and logs it (reference/serve/app.py), once
            ended = True
            raise
        finally:
            meter.end()
            await rows.aclose()
            if not ended:  # the client left: abort the engine request
                await self.api.engine.abort(request_id)
                self.metrics.aborted.inc()
            _release(ticket)

    async def stream(self, request: SpeechRequest, request_id: str, received: float,
                     ticket: Ticket | None = None, usage: Usage | None = None) -> AsyncIterator[torch.Tensor]:
        """PCM chunks (24 kHz float) as the geometry cuts them; closing the iterator early aborts.
        `usage.output_tokens` counts the rows as they arrive."""
        progress, first = _Progress(self.metrics), True
        chunks = self.api.stage.stream(self._frames(request, request_id, progress, ticket, usage))
        try:
            async for item in chunks:
                if first:
                    self.metrics.ttfa.observe(time.monotonic() - received)
                    first = False
                yield item
        finally:
            await chunks.aclose()
            progress.end()
            _release(ticket)  # also when the stage stream ended before its frame source started


def _release(ticket: Ticket | None) -> None:
    if ticket is not None:
        ticket.release()
