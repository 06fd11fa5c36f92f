"""The speech API over a talker engine: text (and an optional reference voice, as audio or as
codec codes) in, codes and PCM out; offline with `LLM`, streaming with `AsyncLLM`, where closing
the stream aborts it. Streamed PCM comes from the engine's one code2wav stage
(reference/codec/stage.py), which batches the chunks of all streams."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from vllm.inputs import TokensPrompt

from reference.codebooks import CODEBOOK_SIZE, NUM_CODEBOOKS
from reference.codec.delay_pattern import rows_to_frames
from reference.codec.encoder import load_encoder
from reference.codec.geometry import StreamGeometry
from reference.codec.stage import CodecStage
from reference.codec.wav_io import read_wav
from reference.deploy.sampling import validate_sampling_params
from reference.talker import code_channel, prompts
from reference.talker.prompt_salt import PromptSalts
from reference.talker.special_tokens import load_tokenizer, special_ids


class EngineAborted(RuntimeError):
    """A streamed request the engine finished as aborted: its audio stops short of its end."""


@dataclass(frozen=True)
class SpeechRequest:
    """Text to speak, with an optional reference voice: its audio (a WAV path, or mono float
    samples at `ref_sample_rate`) or its codec codes, and optionally its transcript."""

    text: str
    ref_codes: Sequence[Sequence[int]] | None = None  # [8, T] codec codes of the reference audio
    ref_text: str | None = None
    sampling: dict = field(default_factory=dict)  # temperature, top_p, top_k, seed, max_tokens
    ref_audio: str | Path | np.ndarray | torch.Tensor | None = None
    ref_sample_rate: int = 24000  # of ref_audio when it is an array


@dataclass
class SpeechResult:
    rows: list[list[int]]  # delay-pattern rows as generated [num_rows, 8]
    lm_tokens: list[int]
    finish_reason: str | None

    @property
    def frames(self) -> torch.Tensor:
        """Real codec frames: rows reverted, frames holding BOC/EOC dropped. [8, T]"""
        if len(self.rows) < NUM_CODEBOOKS:
            return torch.empty(NUM_CODEBOOKS, 0, dtype=torch.long)
        return rows_to_frames(torch.tensor(self.rows, dtype=torch.long))


class SpeechAPI:
    def __init__(self, engine, checkpoint: str | Path, runner: str, default_max_tokens: int = 2048,
                 stage: CodecStage | None = None, share_voice_prefix: bool = True):
        self.engine = engine
        # Prefix-cache salts (reference/talker/prompt_salt.py): with share_voice_prefix, requests
        # of one voice share its prompt blocks; without, every request gets a salt of its own.
        self.salts = PromptSalts() if share_voice_prefix else None
        self.stage = stage  # code2wav for stream_audio: CodecStage.from_deployment(...)
        self.runner = runner
        self.checkpoint = Path(checkpoint)
        self.tokenizer = load_tokenizer(checkpoint)
        self.ids = special_ids(self.tokenizer)
        self.default_max_tokens = default_max_tokens
        self._encoder = None  # the bundled audio tokenizer's encoder, for ref_audio

    def reference_codes(self, request: SpeechRequest) -> torch.Tensor | None:
        """The reference's codec codes [8, T]: given, or encoded from its audio by the checkpoint's
        bundled audio tokenizer (loaded on first use, on the CPU)."""
        if request.ref_audio is not None and request.ref_codes is not None:
            raise ValueError("SpeechRequest: give ref_audio or ref_codes, not both")
        if request.ref_codes is not None:
            return torch.as_tensor(request.ref_codes)
        if request.ref_audio is None:
            return None
        if self._encoder is None:
            self._encoder = load_encoder(self.checkpoint)
        if isinstance(request.ref_audio, (str, Path)):
            wav, rate = read_wav(request.ref_audio)
        else:
            wav, rate = request.ref_audio, request.ref_sample_rate
        return self._encoder.encode(wav, rate)

    def prompt(self, request: SpeechRequest) -> prompts.TalkerPrompt:
        codes = self.reference_codes(request)
        if codes is None:
            if request.ref_text is not None:
                raise ValueError("SpeechRequest: ref_text without a reference (ref_audio or ref_codes)")
            return prompts.zero_shot(self.tokenizer, self.ids, request.text)
        return prompts.voice_clone(self.tokenizer, self.ids, request.text, codes, request.ref_text)

    def _inputs(self, request: SpeechRequest, stream: bool):
        prompt = self.prompt(request)
        sampling = {"max_tokens": self.default_max_tokens, **validate_sampling_params(request.sampling, self.runner)}
        params = code_channel.talker_sampling_params(
            stop_token_ids=self.ids.stop_ids, ref_rows=prompt.ref_rows, ref_start=prompt.ref_start,
            stream=stream, **sampling
        )
        salt = self.salts.salt(prompt) if self.salts is not None else code_channel.unique_cache_salt()
        tokens = TokensPrompt(prompt_token_ids=list(prompt.token_ids), cache_salt=salt)
        return tokens, params

    def _audio_rows(self, steps) -> list[list[int]]:
        """The rows of the audio steps (the final EOS step carries no audio)."""
        return [codes for lm, codes in steps if lm == self.ids.audio]

    def _result(self, steps, finish_reason) -> SpeechResult:
        return SpeechResult(self._audio_rows(steps), [lm for lm, _ in steps], finish_reason)

    def generate(self, requests: Sequence[SpeechRequest]) -> list[SpeechResult]:
        """Offline: all requests submitted together (they share the engine's batch)."""
        inputs = [self._inputs(r, stream=False) for r in requests]
        outputs = self.engine.generate([t for t, _ in inputs], [p for _, p in inputs], use_tqdm=False)
        return [
            self._result(code_channel.decode(o.outputs[0].logprobs), o.outputs[0].finish_reason) for o in outputs
        ]

    async def stream_rows(self, request: SpeechRequest, request_id: str) -> AsyncIterator[list[list[int]]]:
        """Streaming with AsyncLLM: yields the new delay-pattern rows as they are generated.
        Closing the iterator (or cancelling its task) aborts the request in the engine."""
        tokens, params = self._inputs(request, stream=True)
        async for output in self.engine.generate(tokens, params, request_id=request_id):
            steps = code_channel.decode(output.outputs[0].logprobs) if output.outputs[0].logprobs else []
            rows = self._audio_rows(steps)
            if rows:
                yield rows
            if output.outputs[0].finish_reason == "abort":  # not by this stream: its close aborts without an output
                raise EngineAborted(f"the talker engine aborted request {request_id} before its end (the engine "
                                    "stopping, or an abort from outside the stream): its audio is incomplete")

    async def stream_frames(self, request: SpeechRequest, request_id: str) -> AsyncIterator[torch.Tensor]:
        """Real codec frames [8, n] as their rows arrive (n may be 0); closing the iterator aborts."""
        rows, frames = self.stream_rows(request, request_id), RowsToFrames()
        try:
            async for new_rows in rows:
                yield frames.add(new_rows)
        finally:
            await rows.aclose()  # aborts the engine request when the caller stopped early

    def stream_audio(
        self, request: SpeechRequest, request_id: str, geometry: StreamGeometry | None = None
    ) -> AsyncIterator[torch.Tensor]:
        """Streaming PCM chunks (24 kHz float) cut by `geometry` (default: the stage's), decoded by
        the code2wav stage; closing the iterator aborts the request."""
        if self.stage is None:
            raise ValueError("SpeechAPI.stream_audio needs a code2wav stage: SpeechAPI(..., "
                             "stage=CodecStage.from_deployment(deployment, codec))")
        return self.stage.stream(self.stream_frames(request, request_id), geometry)


class RowsToFrames:
    """Turns delay-pattern rows arriving in order into real codec frames as soon as they are
    complete: frame t needs rows t..t+7, codebook q of it is row t+q's (delay_pattern.revert_delay).
    Frames holding BOC/EOC are dropped. Plain lists: a row or a few arrive a call, for which
    numpy's and torch's call costs are most of the work (benchmarks/row_path.py)."""

    def __init__(self):
        self.pending: list[list[int]] = []  # the rows from the first frame not yet returned on

    def add(self, rows: list[list[int]]) -> torch.Tensor:
        pending = self.pending
        pending.extend(rows)
        complete = len(pending) - (NUM_CODEBOOKS - 1)  # frames the rows complete
        if complete <= 0:
            return torch.empty(NUM_CODEBOOKS, 0, dtype=torch.long)
        real = [t for t in range(complete) if all(0 <= pending[t + q][q] < CODEBOOK_SIZE for q in range(NUM_CODEBOOKS))]
        frames = [[pending[t + q][q] for t in real] for q in range(NUM_CODEBOOKS)]
        del pending[:complete]
        if not real:
            return torch.empty(NUM_CODEBOOKS, 0, dtype=torch.long)
        return torch.from_numpy(np.array(frames, dtype=np.int64))  # [8, n]; cheaper than torch.tensor(list)
