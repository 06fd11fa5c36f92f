"""Check that the serving checks catch planted defects (issues #11 and #33).

    python -m conformance.mutations.serving [--baseline] [--list] [INDEX ...]

Each mutation plants one defect in a copy of the tree and runs the check of
conformance/serving/test_serving.py or test_server_limits.py meant to catch it, against a server started from that copy (one
server boot per mutation: about a minute and a half each on a CPU); the pace gate's defect is caught without an
engine, by tests/test_admission_pace.py (seconds). The mechanics:
conformance/mutations/run.py. On a CPU the selections run the cpu_default variant; on a GPU
machine the gpu_* variants.
"""

from __future__ import annotations

import sys

from conformance.mutations.run import Mutation, main, mutations_from_table

PROTOCOL, AUDIO, APP, WAV = ("reference/serve/protocol.py", "reference/serve/audio.py", "reference/serve/app.py",
                             "reference/serve/wav.py")
ANSWERS = "reference/serve/answers.py"
V1, STAGE, MAIN = "reference/talker/runner_v1.py", "reference/codec/stage.py", "reference/serve/__main__.py"
ADMISSION = "reference/serve/admission.py"


def serving(selection: str) -> tuple[str, ...]:
    return ("conformance/serving/test_serving.py", "-k", selection)


LIMITS = "conformance/serving/test_server_limits.py"
ABORT = serving("test_disconnect_aborts_the_request_and_spares_the_others")
PLAIN = serving("test_streamed_audio_equals_the_whole_response and plain")
FIRST = serving("test_first_chunk_arrives_before_the_server_takes_the_last_row")
MID_SEND = serving("test_client_leaving_mid_send_aborts_and_frees_everything")
SSE_WAV = serving("test_sse_wav_carries_a_24khz_mono_16bit_header")
HEADERS = serving("test_answer_headers_describe_24khz_audio and streamed_wav")

# (name, file, old text, new text, pytest arguments that must fail)
MUTATIONS = [
    ("an empty input answered 500 (the check dropped: the prompt builder raises)", PROTOCOL,
     "    if not text.strip():\n        raise RequestError(400, \"input\", \"'input' is empty: give the text to speak\")\n",
     "", serving("test_bad_input and (empty_input or whitespace_input)")),
    ("a disconnect that does not abort (the producer runs on)", STAGE,
     "            stream.close()\n            feeder.cancel()\n            await asyncio.gather(feeder, return_exceptions=True)",
     "            pass", ABORT),
    ("a talker slot not freed when its request ends (aborted ones included)", V1,
     "            self.talker_requests.pop(req_id, None)\n",
     "            pass\n", ABORT),
    ("the streamed WAV header claiming a length (0 bytes of data)", ANSWERS,
     "    if fmt == \"wav\":\n        yield wav_header(None)\n", "    if fmt == \"wav\":\n        yield wav_header(0)\n",
     PLAIN),
    ("the whole WAV header claiming the wrong length (samples for bytes)", WAV,
     "    data = UNKNOWN_LENGTH if data_bytes is None else data_bytes\n",
     "    data = UNKNOWN_LENGTH if data_bytes is None else data_bytes // 2\n", PLAIN),
    ("streamed chunks dropped after the first (a gap)", AUDIO,
     "                if first:\n                    self.metrics.ttfa.observe(time.monotonic() - received)\n                    first = False\n                yield item",
     "                if first:\n                    self.metrics.ttfa.observe(time.monotonic() - received)\n                    first = False\n                    yield item",
     PLAIN),
    ("the answer gathered whole before its first chunk (no streaming)", AUDIO,
     "            async for item in chunks:\n                if first:",
     "            for item in [c async for c in chunks]:\n                if first:", FIRST),
    ("a response that no longer ends its body when the client leaves mid-send (it stops watching for the "
     "disconnect, as if the server's send raised then: uvicorn's returns silently)", ANSWERS,
     "            await super().__call__(scope, receive, counted_send)\n",
     "            await super().__call__({**scope, \"asgi\": {**scope.get(\"asgi\", {}), \"spec_version\": \"2.4\"}},\n"
     "                                   receive, counted_send)\n", MID_SEND),
    ("a streamed SSE WAV whose header claims 22050 Hz", ANSWERS,
     "        async for data in answer_bytes(first, chunks, fmt, speed, stop):\n            yield _event(",
     "        async for data in answer_bytes(first, chunks, fmt, speed, stop):\n"
     "            data = wav_header(None, 22050) if data == wav_header(None) else data\n            yield _event(", SSE_WAV),
    ("a streamed answer whose X-Sample-Rate claims 22050", APP,
     "described = {\"X-Sample-Rate\": str(SAMPLE_RATE),", "described = {\"X-Sample-Rate\": \"22050\",",
     HEADERS),
    ("an engine started with other settings than the profile resolved (max_num_seqs 3): the server must "
     "refuse to start, since what vLLM built is read back", MAIN,
     "**deployment_engine_kwargs(deployment))", "**{**deployment_engine_kwargs(deployment), \"max_num_seqs\": 3})",
     PLAIN),
    ("a queue without a limit (every request waits for a slot, none is turned away)", ADMISSION,
     "if self.waiting >= limits.max_waiting_requests:", "if False:",
     (LIMITS, "-k", "overload")),
    ("a server that keeps running on a dead engine (the watchdog's exit dropped)", MAIN,
     "    exits.append(ENGINE_DEAD_EXIT)\n", "    return\n", (LIMITS,)),
    ("a pace gate that no longer reads the pace (serving.min_realtime_factor set, a free slot always taken)",
     ADMISSION, "        return floor is None or self.running == 0 or pace is None or pace >= floor\n",
     "        return True\n", ("tests/test_admission_pace.py",)),
    ("idle connections closed at uvicorn's default 5 s, httpx's keep-alive (a reused one is reset)", MAIN,
     "                                           timeout_keep_alive=keep_alive,\n", "",
     serving("test_an_idle_connection_outlives_a_clients_keep_alive")),
]


def mutations() -> list[Mutation]:
    return mutations_from_table(MUTATIONS)


if __name__ == "__main__":
    raise SystemExit(main(mutations(), sys.argv[1:], prefix="mutate_serving_"))
