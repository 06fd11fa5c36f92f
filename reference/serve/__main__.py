"""Serve Higgs Audio v3 speech over HTTP, OpenAI-compatible.

    higgs-serve --model DIR [--profile default] [--host 127.0.0.1 --port 8000]    (or python -m reference.serve)
        [--platform cpu|cuda|...] [--set KEY=VALUE ...] [--voices DIR] [--served-model-name NAME]

Clients name the model `higgs-audio-v3-tts-4b` (SERVED_MODEL_NAME), whatever folder holds the
checkpoint, unless --served-model-name says otherwise. SIGTERM or Ctrl-C (SIGINT) stops the server
gracefully (reference/serve/stop.py): new requests and /health answer 503, the running ones get the
profile's serving.drain_timeout_s to finish, the rest are cut (SSE: an `error` event), then the
engine stops and the exit status is 0; a second signal stops at once. An idle connection stays open
serving.keep_alive_s, longer than clients keep theirs (docs/serving.md).
The arguments are read before torch, vLLM or the web stack are imported: --help and a bad
argument answer at once.

The deploy profile (a name in reference/deploy/profiles/ or a path) is resolved for the platform
(default: cuda when torch sees a GPU, else cpu) with the `--set` overrides (dotted keys of the
deploy format, as `python -m reference.deploy` takes them). The talker is vLLM's AsyncLLM with
the resolved stage 0 (its runner made explicit); the code2wav stage (reference/codec/stage.py)
runs the codec on stage 1's device, batching the chunks of all streams up to stage 1's
max_num_seqs, with the resolved geometry and the connector's max_inflight_chunks per stream.
That geometry also sets what a request without `stream_format` gets (protocol.StreamDefault):
streamed audio where it stitches exactly, one whole response where it is lossy.
`--voices DIR` adds a named voice per DIR/NAME.wav (transcript: NAME.txt); `POST /v1/audio/voices` stores
uploads there (reference/serve/voices.py), so they are kept across restarts.
Before serving, what vLLM built is read back and compared with the profile (reference/deploy/readback.py),
and the code2wav stage decodes a window of each length once (CodecStage.warm), so the first
request's audio does not wait for the decoder's first use.
The profile's `serving` limits bound the requests waiting for a talker slot and, with
`serving.min_realtime_factor`, hold them while the talker's pace is under real time x the factor
(reference/serve/admission.py).
Exit status: 0 after a normal stop, 2 for an invalid profile or override, 3 when the start
check refused what vLLM built, 1 when the engine died while serving (EXIT_DEADLINE_S after the
watchdog saw it at the latest).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Sequence


def build_service(args):
    """(Service, engine, resolved deployment, Stop, keep-alive s) for the parsed arguments; boots the engine (tens of
    seconds)."""
    import torch

    from reference.codec.model import load_codec
    from reference.codec.stage import CodecStage
    from reference.deploy.cli import parse_set
    from reference.deploy.resolve import resolve_deployment
    from reference.deploy.stream_check import check_stream
    from reference.serve.admission import Admission, ServingLimits
    from reference.serve.app import Service
    from reference.serve.audio import Speaker
    from reference.serve.metrics import ServeMetrics
    from reference.serve.protocol import Limits, stream_default
    from reference.serve.stop import Stop
    from reference.serve.voices import VoiceStore, load_voices
    from reference.speech import SpeechAPI
    from reference.talker.engine import deployment_engine_kwargs, stage_device, start_async_llm

    platform = args.platform or ("cuda" if torch.cuda.is_available() else "cpu")
    deployment = resolve_deployment(args.profile, platform, parse_set(args.sets))
    voices = load_voices(args.voices)
    stop = Stop.from_deployment(deployment)  # before the engine: a profile without the drain limit fails at once
    keep_alive = int(deployment.serving_setting("keep_alive_s", "the speech server keeps an idle connection open "
                                                                 "that long"))  # ... as one without it does
    engine = start_async_llm(args.model, deployment.runner, **deployment_engine_kwargs(deployment))
    max_tokens = deployment.default_sampling_params.get("max_tokens", 2048)
    max_model_len = int(deployment.engine_kwargs.get("max_model_len") or engine.model_config.max_model_len)
    if max_tokens >= max_model_len:
        engine.shutdown()
        raise ValueError(f"{deployment.profile}: stages.0.default_sampling_params.max_tokens {max_tokens} leaves no "
                         f"room for a prompt in stages.0.max_model_len {max_model_len}: every request without its "
                         "own max_tokens would be refused; lower the one or raise the other")
    codec = load_codec(args.model, device=stage_device(deployment, deployment.codec_stage))
    api = SpeechAPI(engine, args.model, deployment.runner, default_max_tokens=max_tokens,
                    stage=CodecStage.from_deployment(deployment, codec))
    metrics = ServeMetrics()
    speaker = Speaker(api=api, metrics=metrics)
    limits = Limits(max_body_bytes=args.max_body_bytes)
    service = Service(
        speaker=speaker,
        model_name=args.served_model_name,
        runner=deployment.runner,
        profile=deployment.profile,
        max_model_len=max_model_len,
        default_sampling=dict(deployment.default_sampling_params),
        voices=voices,
        stream_default=stream_default(check_stream(deployment.geometry, codec.cfg)),
        limits=limits,
        admission=Admission(ServingLimits.from_deployment(deployment), metrics, speaker.pace),
        store=VoiceStore(voices, Path(args.voices) if args.voices else None, limits.max_ref_audio_bytes,
                         limits.max_ref_audio_seconds),
    )
    logging.getLogger("higgs_ref.serve").info("without stream_format: %s", service.stream_default.header)
    return service, engine, deployment, stop, keep_alive


async def start(engine, deployment, stage) -> None:
    """Before the first request: what vLLM built is read back, then the code2wav stage is warmed."""
    await check_engine_build(engine, deployment)
    began = time.monotonic()
    lengths = await asyncio.to_thread(stage.warm)
    logging.getLogger("higgs_ref.serve").info("warmed the code2wav stage (%s): decodes of %s frames in %.0f ms",
                                              stage.decodes, ", ".join(map(str, lengths)),
                                              1000 * (time.monotonic() - began))


async def check_engine_build(engine, deployment) -> None:
    """Fails the server's start when what vLLM built differs from the resolved profile: every
    worker reads back its build (reference/deploy/readback.py), BuildMismatch names each key."""
    from reference.deploy.readback import check_build

    check_build(deployment, await engine.collective_rpc("talker_built_settings"))
    logging.getLogger("higgs_ref.serve").info("read back what vLLM built: as %s asks on %s",
                                              deployment.profile, deployment.platform)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, got {value}")
    return value


SERVED_MODEL_NAME = "higgs-audio-v3-tts-4b"  # the model's name (bosonai/higgs-audio-v3-tts-4b), as clients send it


def parse_args(argv: Sequence[str] | None = None):
    parser = argparse.ArgumentParser(prog="higgs-serve", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="default", help="deploy profile: a name or a path (default: %(default)s)")
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="the checkpoint folder (a dummy one: python -m higgs_dummy DIR)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="(default: %(default)s)")
    parser.add_argument("--platform", default=None, help="cuda, rocm, npu, xpu, musa or cpu (default: detected)")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="a deploy key of the profile, dotted (stages.0.max_num_seqs=4); repeatable")
    parser.add_argument("--voices", default=None, metavar="DIR", help="a folder of NAME.wav (+ NAME.txt) named voices")
    parser.add_argument("--served-model-name", default=SERVED_MODEL_NAME, metavar="NAME",
                        help=f"the `model` clients send (default: {SERVED_MODEL_NAME}, whatever the folder's name)")
    parser.add_argument("--max-body-bytes", type=_positive, default=8 << 20, metavar="N",
                        help="the largest request body (default: %(default)s)")
    parser.add_argument("--log-level", default="info")
    return parser.parse_args(argv)


GRACEFUL_S = 0.5  # uvicorn's wait, after the drain (stop.py), for the responses the cut did not end
ENGINE_DEAD_EXIT = 1  # also the status faulthandler's hard exit ends the process with
DEAD_LINGER_S = 2  # a dead engine: /health and new requests answer 503 this long, then the server stops
EXIT_DEADLINE_S = 8  # ... and the process is gone by then, however the shutdown goes


def exit_on_engine_death(server, exits: list[int]) -> None:
    """The watchdog's action: for DEAD_LINGER_S every request is a 503 naming the dead engine (a
    load balancer polling /health sees it), then uvicorn stops (no new connection; the open
    responses have failed with the engine); the exit status is ENGINE_DEAD_EXIT. Should the
    shutdown hang, faulthandler ends the process at EXIT_DEADLINE_S from its C thread, which needs no
    GIL (a Python timer thread waits for any thread that holds it in C code; with one, the server
    once outlived 10 s under CI's load), after writing every thread's stack to stderr: the log
    shows where the shutdown hung. While the server is stopping (a signal to the whole process
    group reaches the engine core too) the death is the stop's: the server stops at once, exit 0."""
    faulthandler.dump_traceback_later(EXIT_DEADLINE_S, exit=True)  # exit=True: _exit(1)
    if server.stop.stopping:  # the signal reached vLLM's engine core too (Ctrl-C, a signal to the process group)
        logging.getLogger("higgs_ref.serve").warning("stopping: the talker engine stopped with the signal; the "
                                                     "running requests end now")
        server.should_exit = True
        return
    exits.append(ENGINE_DEAD_EXIT)
    linger = threading.Timer(DEAD_LINGER_S, lambda: setattr(server, "should_exit", True))
    linger.daemon = True
    linger.start()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)  # first: --help and a bad argument need none of the imports below

    import uvicorn

    from reference.serve.app import build_app
    from reference.serve.stop import GracefulServer

    logging.basicConfig(level=args.log_level.upper())
    try:
        service, engine, deployment, stop, keep_alive = build_service(args)
    except ValueError as exc:  # an invalid profile, override or platform
        print(f"error: {exc}", file=sys.stderr)
        return 2
    exits: list[int] = []
    app = build_app(service, on_startup=lambda: start(engine, deployment, service.speaker.api.stage),
                    on_shutdown=engine.shutdown, on_engine_dead=lambda: exit_on_engine_death(server, exits), stop=stop)
    server = GracefulServer(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                                           timeout_keep_alive=keep_alive,
                                           timeout_graceful_shutdown=GRACEFUL_S), stop)
    server.run()  # returns after the stop: GracefulServer does not raise the signal again
    if exits:
        print("error: the talker engine died; exiting so that a supervisor can restart the server", file=sys.stderr)
        return exits[0]
    return 0 if server.started else 3


if __name__ == "__main__":
    raise SystemExit(main())
