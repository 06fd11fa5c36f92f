"""The body of `POST /v1/audio/speech`: OpenAI's speech fields plus the talker's, checked one
field at a time so that every error names its field (`RequestError.param`).

OpenAI's fields: `model` (the served name), `input`, `voice` (a name, or `{"id": NAME}`),
`response_format` (wav, the default as vllm-omni's; pcm; mp3, opus, aac, flac encoded by FFmpeg
through PyAV), `stream_format` (audio | sse; absent with `stream`: the server's `StreamDefault`),
`speed` (0.25 to 4.0, OpenAI's range: reference/serve/tempo.py), `instructions` (empty only). The talker's: `ref_audio` (a WAV file, base64),
`ref_text`, `stream` (true = stream_format audio, false = one whole response) and the sampling fields of
reference/deploy/sampling.py (`temperature`, `top_p`, `top_k`, `seed`, `max_tokens` = the length
limit in codec rows of 40 ms; every other vllm.SamplingParams field only at its neutral value,
`logprobs` never). Unknown fields are refused, never ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from reference.deploy.sampling import LOGPROB_FIELDS, NEUTRAL_VALUES, SUPPORTED_FIELDS, SamplingParamsError
from reference.deploy.sampling import validate_sampling_params
from reference.deploy.stream_check import StreamCheck
from reference.serve.tempo import SPEED_RANGE

RESPONSE_FORMATS = ("wav", "pcm", "mp3", "opus", "aac", "flac")  # OpenAI's six (reference/serve/encode.py)
STREAM_FORMATS = ("audio", "sse")
DEFAULT_VOICE = "default"  # zero-shot: no reference voice
SAMPLING_FIELDS = frozenset(SUPPORTED_FIELDS) | frozenset(LOGPROB_FIELDS) | frozenset(NEUTRAL_VALUES)
API_FIELDS = frozenset(
    {"model", "input", "voice", "response_format", "stream_format", "stream", "speed", "instructions",
     "ref_audio", "ref_text"}
)


class RequestError(Exception):
    """A client error: HTTP `status`, the request field it concerns (`param`), a message."""

    def __init__(self, status: int, param: str, message: str):
        super().__init__(message)
        self.status, self.param, self.message = status, param, message

    def body(self) -> dict:
        """OpenAI's error shape."""
        return {"error": {"message": self.message, "type": "invalid_request_error", "param": self.param,
                          "code": self.status}}


def known_voices(voices, shown: int = 3) -> str:
    """A few of the server's voice names and their count, for an error that met an unknown one."""
    names = sorted(voices)
    listed = ", ".join(repr(n) for n in names[:shown])
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"this server knows {len(names)}: {listed}{more} (GET /v1/audio/voices lists them)"


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 8 << 20  # the whole request body
    max_ref_audio_bytes: int = 4 << 20  # the decoded reference WAV file
    max_ref_audio_seconds: float = 30.0


@dataclass(frozen=True)
class StreamDefault:
    """What a request that names neither `stream_format` nor `stream` gets, and why. OpenAI's
    endpoint streams then (its `stream_format` defaults to audio), and so do we where the profile's
    streaming geometry stitches exactly: the stream is the whole response up to float rounding, so
    nothing is lost. Where the geometry is lossy (upstream's V1 geometry: a holdback short of the
    decoder's reach) the stream differs from the offline decode at every chunk edge (23.5 dB on
    the tiny codec), so the default stays the whole response and streaming is asked for by name."""

    stream_format: str | None  # "audio", or None: one whole response
    reason: str

    @property
    def header(self) -> str:
        """The X-Stream-Format-Default header of an answer the default chose (ASCII, one line)."""
        return f"{self.stream_format or 'whole'}; {self.reason}"


def stream_default(check: StreamCheck) -> StreamDefault:
    """The default for a profile whose geometry (with the served codec's reach) is `check`."""
    if check.exact:
        return StreamDefault("audio", f"the streaming geometry {check.shape} (first/chunk/left/holdback frames) "
                                      "stitches exactly: the stream equals the whole response up to float rounding (one 16-bit step)")
    return StreamDefault(None, f"the streaming geometry {check.shape} (first/chunk/left/holdback frames) is lossy "
                               f"({check.shortfall} of the codec decoder's reach): send stream_format audio or sse "
                               "to stream anyway")


@dataclass(frozen=True)
class SpeechBody:
    text: str
    voice: str
    response_format: str
    stream_format: str | None  # None: one whole response
    stream_default: StreamDefault | None  # the server's default, where the request named no stream field
    ref_audio: bytes | None  # a WAV file sent in the request
    ref_text: str | None
    sampling: dict[str, Any]  # the request's own sampling fields, checked (defaults not merged)
    speed: float = 1.0  # the answer played this much faster, at the same pitch (reference/serve/tempo.py)


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(400, "body", f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "body", f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def _string(body: Mapping, name: str, default: str | None = None, required: bool = False) -> str | None:
    value = body.get(name, default)
    if value is None:
        if required:
            raise RequestError(400, name, f"'{name}' is required")
        return None
    if not isinstance(value, str):
        raise RequestError(400, name, f"'{name}' must be a string, got {type(value).__name__}")
    return value


def _choice(body: Mapping, name: str, default: str | None, allowed: tuple[str, ...], note: str = "") -> str | None:
    value = _string(body, name, default)
    if value is not None and value not in allowed:
        raise RequestError(400, name, f"'{name}' {value!r} is not supported{note}; use one of {', '.join(allowed)}")
    return value


def _ref_audio(body: Mapping, limits: Limits) -> bytes | None:
    value = _string(body, "ref_audio")
    if value is None:
        return None
    if len(value) > 4 * math.ceil(limits.max_ref_audio_bytes / 3):
        raise RequestError(400, "ref_audio", f"'ref_audio' is over the limit of {limits.max_ref_audio_bytes} bytes "
                                             "of WAV file")
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(400, "ref_audio", "'ref_audio' must be a WAV file in base64") from None
    if len(data) > limits.max_ref_audio_bytes:
        raise RequestError(400, "ref_audio", f"'ref_audio' is {len(data)} bytes, over the limit of "
                                             f"{limits.max_ref_audio_bytes} bytes of WAV file")
    return data


def _voice(body: Mapping) -> str:
    """A voice name, or OpenAI's custom voice object `{"id": NAME}`."""
    voice = body.get("voice", DEFAULT_VOICE)
    if isinstance(voice, Mapping):
        if set(voice) != {"id"} or not isinstance(voice["id"], str):
            raise RequestError(400, "voice", "'voice' as an object must be {\"id\": NAME} and nothing else, got "
                                             f"{json.dumps(voice)[:200]}")
        return voice["id"]
    return _string(body, "voice", DEFAULT_VOICE)


def _sampling(body: Mapping, runner: str) -> dict[str, Any]:
    accepted: dict[str, Any] = {}
    for name in sorted(k for k in body if k in SAMPLING_FIELDS):
        try:
            accepted.update(validate_sampling_params({name: body[name]}, runner, where="request"))
        except SamplingParamsError as exc:
            raise RequestError(400, name, str(exc)) from None
    return accepted


def _stream_format(body: Mapping, default: StreamDefault) -> tuple[str | None, StreamDefault | None]:
    """(stream_format, the default where it applied)."""
    stream_format = _choice(body, "stream_format", None, STREAM_FORMATS)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise RequestError(400, "stream", f"'stream' must be true or false, got {stream!r}")
    if stream is False and stream_format is not None:
        raise RequestError(400, "stream", f"'stream' false asks for one whole response, 'stream_format' "
                                          f"{stream_format!r} for a stream: send one of them")
    if stream_format is not None:
        return stream_format, None
    if stream is None:
        return default.stream_format, default
    return ("audio" if stream else None), None


def parse_speech(body: Mapping, *, model_name: str, voices, runner: str, limits: Limits,
                 stream_default: StreamDefault) -> SpeechBody:
    """Check every field of a decoded JSON body; `voices` holds the known voice names."""
    for name in sorted(body):
        if name not in API_FIELDS and name not in SAMPLING_FIELDS:
            raise RequestError(400, name, f"unknown field '{name}'")
    model = _string(body, "model", required=True)
    if model != model_name:
        raise RequestError(400, "model", f"model {model!r} is not served here; this server serves {model_name!r}")
    text = _string(body, "input", required=True)
    if not text.strip():
        raise RequestError(400, "input", "'input' is empty: give the text to speak")
    voice = _voice(body)
    if voice not in voices:
        raise RequestError(400, "voice", f"unknown voice {voice!r}; {known_voices(voices)}")
    response_format = _choice(body, "response_format", "wav", RESPONSE_FORMATS)
    stream_format, applied = _stream_format(body, stream_default)
    speed = body.get("speed", 1.0)
    low, high = SPEED_RANGE
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not low <= speed <= high:
        raise RequestError(400, "speed", f"'speed' must be a number from {low:g} to {high:g} (1.0: as the talker "
                                         f"speaks), got {speed!r}")
    if _string(body, "instructions"):
        raise RequestError(400, "instructions", "'instructions' is not supported by the Higgs talker; remove it")
    ref_audio = _ref_audio(body, limits)
    if ref_audio is not None and voice != DEFAULT_VOICE:
        raise RequestError(400, "ref_audio", f"give a named voice ({voice!r}) or 'ref_audio', not both")
    ref_text = _string(body, "ref_text")
    if ref_text is not None and ref_audio is None and voice == DEFAULT_VOICE:
        raise RequestError(400, "ref_text", "'ref_text' without a reference voice ('ref_audio' or a named voice)")
    return SpeechBody(text, voice, response_format, stream_format, applied, ref_audio, ref_text,
                      _sampling(body, runner), float(speed))
