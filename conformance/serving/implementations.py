"""Which speech server the serving checks judge, and what each implementation claims (issue #32).

One switch, two settings:

- `--implementation NAME` (env HIGGS_IMPLEMENTATION): `reference` (default: ours, python -m reference.serve),
  `vllm-omni` (upstream's `vllm-omni serve MODEL --omni`), `sglang-omni` (`sgl-omni serve --model-path MODEL`) or
  `generic` (any OpenAI-compatible speech server);
- `--server-url URL` (env HIGGS_SERVER_URL): the server to judge. Without it the fixtures start our own server
  per variant of conformance/cases/serving/server.yaml, as before; every other implementation needs it, and a URL
  where no server answers fails the checks saying so (the suite never starts ours in its place).

With a URL the checks marked `reference_only` skip with their reason (they need our server's internals: its
`--set` overrides, its engine-core process, its metric names, the tiny dummy checkpoint's goldens), and a check
marked `needs(FEATURE, ...)` skips "not applicable: ..." where the adapter below lacks that feature, with the
adapter's reason. Nothing is passed silently: a check either judges the server or says why it cannot.

An adapter says, per implementation: the model name to send (None: the one `/v1/models` lists), the zero-shot
voice, the request fields that make an answer repeatable (the stream = whole comparisons need the same audio
twice), the names of the fields it spells differently, how it takes a reference WAV and the durations it accepts
(a check's reference outside them is drawn again, from its seed, at the nearest bound: the check is about the
answer, not the reference's length), the formats it answers whole and streamed, the headers it uses to describe
audio, where its errors name the field, and its metrics: a counter of requests aborted because the client left, the
gauges of requests in flight and of what must be idle once nothing runs, a gauge of sends waiting on a slow client,
the series that count 5xx answers.

The vllm-omni facts are from the 0.30.0 wheel (`pip download --no-deps vllm-omni==0.30.0`), paths inside
`vllm_omni/`; the sglang-omni facts from the 0.1.9 wheel (`pip download --no-deps sglang-omni==0.1.9`, sha256
dcc1d0a4...cac05), paths inside `sglang_omni/`. None of their code is copied here.
"""

from __future__ import annotations

import base64
import os
import re
from dataclasses import dataclass, field
from typing import Callable

IMPLEMENTATION_ENV = "HIGGS_IMPLEMENTATION"
SERVER_URL_ENV = "HIGGS_SERVER_URL"
SERVER_VOICE_ENV = "HIGGS_SERVER_VOICE"

# The features a check can need (`@pytest.mark.needs(...)`); an adapter lacks some, each with its reason.
FEATURES = {
    "health": "GET /health answers 200 while the server can serve",
    "repeatable": "a request field that makes the same request answer the same audio twice",
    "sse": "stream_format sse: speech.audio.delta events, then speech.audio.done",
    "ref_audio": "a reference WAV in the request (voice cloning)",
    "named_voice": "the suite's named voice 'narrator' (a WAV + transcript of the server's voice folder)",
    "abort_metric": "a /metrics counter of requests aborted because the client left, and gauges that fall to 0",
    "sends_waiting": "a /metrics gauge of streamed sends waiting on a client that reads nothing",
    "server_errors": "a /metrics series counting answers with status 5xx",
    "metrics": "GET /metrics with the names the adapter lists",
}


def series(values: dict[str, float], name: str, **labels: str) -> float:
    """The sum of the series of `name` whose labels include every `labels` pair (all of them when none)."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for key, value in values.items():
        if key == name or key.startswith(name + "{"):
            if all(w in key[len(name):] for w in wanted):
                total += value
    return total


@dataclass(frozen=True)
class Metrics:
    """What an implementation's /metrics says (Prometheus text, parsed by reference.serve.metrics.parse_metrics)."""

    names: tuple[str, ...]  # names /metrics carries
    aborted: Callable[[dict], float]  # requests aborted because the client left (a counter)
    in_flight: tuple[str, ...]  # gauges whose sum is the speech requests the server still holds
    idle: tuple[str, ...]  # gauges that read 0 once nothing runs: nothing left held after an abort
    server_errors: Callable[[dict], float] | None  # answers with status 5xx (a counter); None: not reported
    sends_waiting: str | None = None  # gauge: streamed sends waiting on their client


@dataclass(frozen=True)
class Implementation:
    name: str
    description: str
    lacks: dict[str, str]  # feature -> why a check needing it is not applicable here
    model: str | None = None  # the model name to send; None: the one /v1/models lists
    voice: str = "default"  # the zero-shot voice
    repeatable: dict = field(default_factory=dict)  # request fields that make an answer repeatable
    renamed: dict = field(default_factory=dict)  # our field name -> the implementation's
    ref_audio: str = "base64"  # how a reference WAV travels: "base64" (the file's bytes) or "data_uri"
    ref_audio_seconds: tuple[float, float] = (0.0, float("inf"))  # the reference durations it accepts (lo, hi)
    # Whether requests carry the suite's answer length (max_tokens) where a check names none. The suite's own
    # servers cap their default (server.yaml); a server at a URL is not the suite's to configure.
    caps_length: bool = False
    whole_formats: frozenset = frozenset()
    streamed_formats: frozenset = frozenset()
    # Per format, the bounds of server.yaml's `formats` that its encoder needs otherwise (a lower bitrate).
    format_bounds: dict = field(default_factory=dict)
    # Fields a streamed request needs besides stream_format (OpenAI's way to ask for a stream is stream_format alone).
    streamed_fields: dict = field(default_factory=dict)
    described_by: tuple[str, ...] = ("content-type",)  # the headers it describes audio with
    whole_media_types: dict = field(default_factory=dict)  # format -> a whole answer's Content-Type, if not MEDIA_TYPES
    error_field_in: str = "param"  # where a 4xx names the field: "param" (OpenAI's error.param) or "param_or_message"
    metrics: Metrics | None = None
    # Bounds of a streamed answer against the whole one (reference.codec.streaming.agreement) and of streams run
    # together against each alone, and how many run together, when judged at a URL.
    bound: dict = field(default_factory=lambda: {"min_snr_db": 20.0, "max_abs_err": 0.25})
    concurrent_bound: dict = field(default_factory=lambda: {"min_snr_db": 70.0, "max_abs_err": 1.0e-3})
    concurrency: int = 4

    def not_applicable(self, *features: str) -> str | None:
        """'not applicable to NAME: REASON' for the first feature this implementation lacks; None if it has all."""
        for feature in features:
            if feature not in FEATURES:
                raise ValueError(f"unknown feature {feature!r}: use one of {', '.join(FEATURES)}")
            if feature in self.lacks:
                return f"not applicable to {self.name}: {self.lacks[feature]}"
        return None

    def format_reason(self, fmt: str, streamed: bool) -> str | None:
        formats = self.streamed_formats if streamed else self.whole_formats
        if fmt in formats:
            return None
        kind = "streamed" if streamed else "whole"
        return f"not applicable to {self.name}: it answers {fmt} {kind} in none of {', '.join(sorted(formats))}"

    def format_bound(self, fmt: str, bound: dict) -> dict:
        """The suite's bound for an encoded answer in `fmt`, with this implementation's own where it has one."""
        return {**bound, **self.format_bounds.get(fmt, {})}

    def fit_ref_audio(self, spec: dict) -> dict:
        """A seeded reference (talker_cases.reference_audio's {seconds, seed}) within the durations this
        implementation accepts: the same spec where it fits, else the same seed's noise at the nearest bound (the
        longer draw starts with the shorter one's samples)."""
        lo, hi = self.ref_audio_seconds
        seconds = min(max(float(spec["seconds"]), lo), hi)
        return spec if seconds == float(spec["seconds"]) else {**spec, "seconds": seconds}

    def encode_ref_audio(self, wav: bytes) -> str:
        data = base64.b64encode(wav).decode()
        return f"data:audio/wav;base64,{data}" if self.ref_audio == "data_uri" else data

    def body(self, model: str, text: str, ref_wav: bytes | None = None, ref_text: str | None = None,
             max_tokens: int | None = None, default_max_tokens: int | None = None, **extra) -> dict:
        """A request in this implementation's spelling: ours (the suite's field names) renamed, its repeatable
        fields added, `default_max_tokens` where the caller names no max_tokens and the adapter caps length. A field
        renamed to None is not sent; one the caller passes as None is dropped."""
        if max_tokens is None and self.caps_length:
            max_tokens = default_max_tokens
        body = {"model": model, "input": text, "voice": self.voice, **self.repeatable, "max_tokens": max_tokens}
        if ref_wav is not None:
            body["ref_audio"] = self.encode_ref_audio(ref_wav)
        if ref_text is not None:
            body["ref_text"] = ref_text
        body.update(extra)
        return self.spell(body)

    def streamed(self, body: dict, stream_format: str = "audio") -> dict:
        """`body` (already in this implementation's spelling) asking for a streamed answer: `stream_format` (audio or
        sse) and whatever else this implementation needs to stream."""
        return {**body, "stream_format": stream_format, **self.streamed_fields}

    def spell(self, body: dict) -> dict:
        """A request written with the suite's field names, in this implementation's: renamed, a field renamed to
        None left out (it has no such field), a field whose value is None dropped."""
        out = {}
        for key, value in body.items():
            key = self.renamed.get(key, key)
            if key is not None and value is not None:
                out[key] = value
        return out

    def names_field(self, error: dict, field_name: str) -> bool:
        """Whether an OpenAI error body names `field_name` where this implementation puts it."""
        if error.get("param") == field_name:
            return True
        if self.error_field_in == "param_or_message":
            return re.search(rf"\b{re.escape(field_name)}\b", str(error.get("message", "")), re.IGNORECASE) is not None
        return False

    def variant(self) -> dict:
        """The stand-in for a server.yaml variant when judging a server at a URL."""
        return {"id": self.name, "platform": "url", "runner": None, "bound": self.bound,
                "concurrent_bound": self.concurrent_bound, "concurrency": self.concurrency}


OPENAI_FORMATS = frozenset({"wav", "pcm", "mp3", "opus", "aac", "flac"})

REFERENCE = Implementation(
    name="reference",
    description="ours: python -m reference.serve (reference/serve/)",
    lacks={},
    repeatable={"temperature": 0.0},
    ref_audio_seconds=(0.0, 30.0),  # any samples, up to Limits.max_ref_audio_seconds (reference/serve/protocol.py)
    whole_formats=OPENAI_FORMATS,
    streamed_formats=OPENAI_FORMATS,
    described_by=("content-type", "x-sample-rate", "x-channels", "x-bit-depth"),
    whole_media_types={"aac": "audio/mp4"},  # MP4, whose edit list declares the priming (reference/serve/encode.py)
    metrics=Metrics(
        names=("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
               "higgs_serve_requests_running", "higgs_serve_requests_waiting", "higgs_serve_requests_aborted_total",
               "higgs_serve_talker_slots_in_use", "higgs_serve_ttfa_seconds_count",
               "higgs_serve_first_decode_seconds_count", "higgs_serve_sends_waiting"),
        aborted=lambda v: series(v, "higgs_serve_requests_aborted_total"),
        in_flight=("higgs_serve_requests_running", "higgs_serve_requests_waiting"),
        idle=("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
              "higgs_serve_talker_slots_in_use", "higgs_serve_requests_running", "higgs_serve_requests_waiting",
              "higgs_serve_sends_waiting"),
        server_errors=lambda v: series(v, "higgs_serve_requests_total", status="500"),
        sends_waiting="higgs_serve_sends_waiting",
    ),
)

VLLM_OMNI = Implementation(
    name="vllm-omni",
    description="upstream: vllm-omni 0.30.0, `vllm-omni serve MODEL --omni` (entrypoints/openai/serving_speech.py)",
    lacks={
        "sends_waiting": "its /metrics has no gauge of sends waiting on a slow client (its speech counters are "
                         "streams aborted and completed: metrics/definitions.py:168-169)",
        "named_voice": "the suite's named voice is a WAV of our --voices folder; upstream's named voices are built-in "
                       "speakers or uploads through POST /v1/audio/voices (serving_speech.py:862), which the suite "
                       "does not make",
    },
    # No temperature field (protocol/audio.py:58-190); the stage's default sampling is temperature 1.0 with
    # seed 42 (deploy/higgs_multimodal_qwen3.yaml:60-64), and a request may name its seed (protocol/audio.py:160).
    repeatable={"seed": 7},
    renamed={"max_tokens": "max_new_tokens", "temperature": None},  # protocol/audio.py:154
    ref_audio="data_uri",  # http(s), data: base64 URIs or file: paths (serving_speech.py:1304-1306)
    # 1 s to 30 s, else 400 "Reference audio too short/long" (serving_speech.py:109-110, checked at 1274-1283).
    ref_audio_seconds=(1.0, 30.0),
    # Its stage 0 answers up to 2048 rows by default (deploy/higgs_multimodal_qwen3*.yaml `max_tokens: 2048`): on a
    # dummy checkpoint that never ends an answer, 75 s each on the H200.
    caps_length=True,
    whole_formats=frozenset({"wav", "pcm", "flac", "mp3", "opus"}),  # protocol/audio.py:83: no aac
    streamed_formats=frozenset({"wav", "pcm"}),  # serving_speech.py:2487-2490, protocol/audio.py:336-341
    # Its Opus is libsndfile's at its default bitrate (no setting given: entrypoints/openai/audio_utils_mixin.py:85-97),
    # about 35-39 kbit/s here against our 64: the log-mel distance measured 2.69 dB on the H200 (2026-12-04, no
    # priming, not a sample missing), 0.88-2.16 dB on tests/test_serve_encode.py's signals; the same encoder with 1 s
    # dropped scores 9.9-14.6 dB, so 4 dB still fails a dropped chunk or a cut tail.
    format_bounds={"opus": {"max_mel_db": 4.0}},
    error_field_in="param_or_message",  # a ValueError's text becomes the message (serving_speech.py:2322, 2709)
    metrics=Metrics(
        # vLLM's engine families (relabelled per stage: metrics/stat_logger.py), omni's request gauges
        # (metrics/prometheus.py:10-19, definitions.py:144-145) and its speech counters; prometheus_client adds _total
        # to a counter's name (metrics/definitions.py:168, metrics/modality.py:82-90). The speech counters are
        # labelled (model_name, reason), so until the first stream ends /metrics declares them (# TYPE) with no series.
        names=("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
               "vllm_omni:num_requests_running", "vllm_omni:num_requests_waiting",
               "vllm_omni:speech_stream_aborted_total", "vllm_omni:speech_stream_completed_total"),
        # A client that leaves: "cancelled" (CancelledError) or "closed" (GeneratorExit), serving_speech.py:1763-1767,
        # counted while --disable-log-stats is not given (metrics/modality.py:169-174).
        aborted=lambda v: (series(v, "vllm_omni:speech_stream_aborted_total", reason="cancelled")
                           + series(v, "vllm_omni:speech_stream_aborted_total", reason="closed")),
        # The requests the API server holds, republished when each one is cleaned up, an abort included
        # (entrypoints/omni_base.py:414-432, 452-456; async_omni.py:317-335). Not vLLM's vllm:num_requests_* and
        # vllm:kv_cache_usage_perc: those are each stage scheduler's snapshot, made at most once a second
        # (core/sched/omni_scheduler_mixin.py:53, 986-991) and only while it steps, so an engine that goes idle
        # within a second of its last snapshot keeps showing it (docs/implementations.md, the H200 findings).
        in_flight=("vllm_omni:num_requests_running", "vllm_omni:num_requests_waiting"),
        idle=("vllm_omni:num_requests_running", "vllm_omni:num_requests_waiting"),
        # vLLM's prometheus-fastapi-instrumentator groups statuses as "5xx" (vllm/entrypoints/serve/instrumentator).
        server_errors=lambda v: series(v, "http_requests_total", status="5xx"),
    ),
)

SGLANG_OMNI = Implementation(
    name="sglang-omni",
    description="sglang-omni 0.1.9, `sgl-omni serve --model-path MODEL` (serve/openai_api.py; models/higgs_tts/)",
    lacks={
        "metrics": "its server has no /metrics (serve/openai_api.py registers none; its routes: /health, /v1/models, "
                   "/v1/audio/speech, /v1/audio/voices, admin routes)",
        "abort_metric": "its server has no /metrics, so no counter of aborted requests (serve/openai_api.py)",
        "sends_waiting": "its server has no /metrics, so no gauge of sends waiting on a client (serve/openai_api.py)",
        "server_errors": "its server has no /metrics, so no counter of 5xx answers (serve/openai_api.py)",
        "named_voice": "the suite's named voice is a WAV of our --voices folder; its named voices are uploads through "
                       "POST /v1/audio/voices with a `consent` field (serve/openai_api.py:649-656), and the Higgs "
                       "pipeline answers 400 for any other name (models/higgs_tts/config.py:173-174, "
                       "serve/speech_service.py:827-833)",
    },
    # Greedy at temperature 0: argmax over the raw logits (models/higgs_tts/sampler.py:311-316); its speech requests
    # otherwise sample at temperature 0.8, top_p 0.8, top_k 30 (models/higgs_tts/stages.py:101-105). A `seed` would
    # also repeat (sampler.py:346-356: drawn from (seed, step x 8 + codebook)).
    repeatable={"temperature": 0.0},
    renamed={"max_tokens": "max_new_tokens"},  # serve/protocol.py:439
    # `ref_audio` is a path or URL (http, https, data, file): a data: URI (serve/speech_service.py:1007-1029).
    ref_audio="data_uri",
    # A clip under 1 s is padded to 1 s before encoding (models/higgs_tts/audio_codec.py:340-343); over 100 s refused
    # (models/higgs_tts/stages.py:84, 381-386).
    ref_audio_seconds=(0.0, 100.0),
    # Its engine answers up to 2048 rows by default (models/higgs_tts/config.py:57, stages.py:445).
    caps_length=True,
    whole_formats=OPENAI_FORMATS,  # serve/protocol.py:367 (mp3, opus, aac through PyAV; flac through soundfile)
    # A stream is raw 16-bit PCM or SSE of it: `stream: true` (or stream_format sse) with response_format pcm, else
    # 400 "stream=true requires response_format='pcm'" (serve/speech_service.py:322-329); stream_format audio
    # without `stream` answers whole (serve/openai_api.py:1912).
    streamed_formats=frozenset({"pcm"}),
    streamed_fields={"stream": True},
    # Streams name X-Sample-Rate, X-Channels, X-Bit-Depth (serve/openai_api.py:2301-2305); whole answers, raw PCM
    # included, only their Content-Type (serve/openai_api.py:1952-1990): only Content-Type is judged.
    described_by=("content-type",),
    whole_media_types={"opus": "audio/opus"},  # Ogg Opus, named audio/opus (client/audio.py:23-30)
    # Its 4xx carry error.param where the field is known; a request that fails its pydantic model names the field in
    # the message only (serve/speech_service.py:278-279, serve/speech_errors.py:96-103).
    error_field_in="param_or_message",
)

GENERIC = Implementation(
    name="generic",
    description="any OpenAI-compatible speech server: only OpenAI's request fields, no metrics assumed",
    lacks={
        "health": "GET /health is not part of OpenAI's API",
        "repeatable": "OpenAI's speech API has no field that makes an answer repeatable (no seed, no temperature), "
                      "so a stream cannot be compared with the whole answer of the same request",
        "ref_audio": "a reference WAV (ref_audio) is not an OpenAI request field",
        "named_voice": "the suite's named voice is a WAV of our --voices folder",
        "abort_metric": "a generic server names no metric that counts an aborted request",
        "sends_waiting": "a generic server names no metric of sends waiting on a client",
        "server_errors": "a generic server names no metric that counts 5xx answers",
        "metrics": "a generic server names no metrics",
    },
    voice=os.environ.get(SERVER_VOICE_ENV, "default"),
    whole_formats=OPENAI_FORMATS,
    streamed_formats=OPENAI_FORMATS,
    error_field_in="param_or_message",
)

IMPLEMENTATIONS = {i.name: i for i in (REFERENCE, VLLM_OMNI, SGLANG_OMNI, GENERIC)}


@dataclass(frozen=True)
class Selection:
    implementation: Implementation
    url: str | None  # None: the fixtures start our server

    @property
    def remote(self) -> bool:
        return self.url is not None

    def describe(self) -> str:
        return f"{self.implementation.name} at {self.url}" if self.url else f"{self.implementation.name} (started here)"


def choose(name: str | None = None, url: str | None = None, environ=os.environ) -> Selection:
    """The selection from the options (None: the environment's, then the defaults); ValueError naming the option
    and the fix."""
    name = name or environ.get(IMPLEMENTATION_ENV) or REFERENCE.name
    url = url or environ.get(SERVER_URL_ENV) or None
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"--implementation / {IMPLEMENTATION_ENV}: unknown implementation {name!r}; use one of "
                         f"{', '.join(IMPLEMENTATIONS)}")
    if url is not None:
        if not re.fullmatch(r"https?://[^/\s]+/?", url):
            raise ValueError(f"--server-url / {SERVER_URL_ENV}: {url!r} is not a base URL such as "
                             f"http://127.0.0.1:8000 (scheme, host and port; the checks add /v1/audio/speech)")
        url = url.rstrip("/")
    elif name != REFERENCE.name:
        raise ValueError(f"--implementation {name} needs --server-url URL (or {SERVER_URL_ENV}): the suite starts "
                         f"only its own server; start {name}'s and give its address (docs/implementations.md)")
    return Selection(IMPLEMENTATIONS[name], url)


_selected: Selection | None = None


def select(selection: Selection) -> None:
    """Set by conftest.py's pytest_configure from the options."""
    global _selected
    _selected = selection


def selection() -> Selection:
    """The session's selection (conftest.py); outside pytest, the environment's."""
    return _selected if _selected is not None else choose()


def add_options(parser) -> None:
    group = parser.getgroup("implementation", "the speech server the serving checks judge (issue #32)")
    group.addoption("--implementation", choices=sorted(IMPLEMENTATIONS), default=None,
                    help=f"the implementation under test (default ${IMPLEMENTATION_ENV}, else reference): "
                         f"{'; '.join(f'{i.name}: {i.description}' for i in IMPLEMENTATIONS.values())}")
    group.addoption("--server-url", default=None, metavar="URL",
                    help=f"judge the server at URL instead of starting ours (default ${SERVER_URL_ENV}); "
                         f"reference_only checks then skip with their reason")
