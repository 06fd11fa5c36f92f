"""The speech server's request parsing and audio bytes, without an engine (reference/serve/)."""

import base64
import json
import struct
import wave

import httpx
import numpy as np
import pytest

from reference.codec.geometry import DEFAULT_GEOMETRY, UPSTREAM_V1, StreamGeometry
from reference.deploy.stream_check import check_stream
from reference.serve.protocol import Limits, RequestError, parse_json, parse_speech, stream_default
from reference.serve.voices import decode_ref_audio
from reference.serve.wav import UNKNOWN_LENGTH, parse_header, pcm16, wav_file, wav_header

VOICES = {"default", "narrator"}
EXACT = stream_default(check_stream(DEFAULT_GEOMETRY))  # 8/25/10/10: context and holdback cover the reach
LOSSY = stream_default(check_stream(UPSTREAM_V1))  # 1/25/25/4: holdback 6 frames short


def parse(runner="v1", default=LOSSY, **fields):
    body = {"model": "m", "input": "Hello.", **fields}
    return parse_speech(body, model_name="m", voices=VOICES, runner=runner, limits=Limits(), stream_default=default)


def refused(param, runner="v1", **fields) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse(runner, **fields)
    assert info.value.param == param and 400 <= info.value.status < 500
    return info.value


def test_defaults_wav_zero_shot():
    body = parse()
    assert (body.voice, body.response_format, body.ref_audio, body.sampling) == ("default", "wav", None, {})


def test_absent_stream_format_streams_where_the_geometry_stitches_exactly():
    body = parse(default=EXACT)
    assert (body.stream_format, body.stream_default) == ("audio", EXACT)
    assert EXACT.header.startswith("audio; the streaming geometry 8/25/10/10 ") and "stitches exactly" in EXACT.header


def test_absent_stream_format_answers_whole_where_the_geometry_is_lossy_and_says_why():
    body = parse(default=LOSSY)
    assert (body.stream_format, body.stream_default) == (None, LOSSY)
    assert LOSSY.header.startswith("whole; the streaming geometry 1/25/25/4 ")
    assert "lossy (holdback 6 short" in LOSSY.header and "send stream_format audio or sse" in LOSSY.header
    LOSSY.header.encode("ascii")  # an HTTP header value


@pytest.mark.parametrize("left, holdback, expect", [(10, 10, "audio"), (25, 10, "audio"), (9, 10, None),
                                                    (10, 9, None), (25, 4, None)])
def test_the_default_follows_the_decoders_reach(left, holdback, expect):
    """One frame short of the codec decoder's 10-frame reach on either side is lossy."""
    default = stream_default(check_stream(StreamGeometry(1, 25, left, holdback)))
    assert parse(default=default).stream_format == expect


@pytest.mark.parametrize("default", [EXACT, LOSSY], ids=["exact", "lossy"])
def test_a_named_stream_field_overrides_the_default(default):
    assert (parse(default=default, stream=True).stream_format, parse(default=default, stream=True).stream_default) == (
        "audio", None)
    assert (parse(default=default, stream=False).stream_format, parse(default=default, stream=False).stream_default) == (
        None, None)
    assert parse(default=default, stream_format="sse").stream_format == "sse"
    assert parse(default=default, stream_format="audio", stream=True).stream_format == "audio"


def test_stream_false_beside_a_stream_format_is_refused():
    assert "send one of them" in refused("stream", stream=False, stream_format="audio").message
    refused("stream", stream="yes")


def test_the_openai_clients_default_request_names_no_stream_field():
    """What `client.audio.speech.create` sends when the caller gives only the required fields:
    neither stream_format nor stream, so the server's default decides."""
    openai = pytest.importorskip("openai", reason="the openai package (installed with vLLM) is missing")
    sent = []

    def handler(request):
        sent.append(json.loads(request.content))
        return httpx.Response(200, content=b"")

    client = openai.OpenAI(base_url="http://server/v1", api_key="unused",
                           http_client=httpx.Client(transport=httpx.MockTransport(handler)))
    client.audio.speech.create(model="m", voice="default", input="Hello.")
    with client.audio.speech.with_streaming_response.create(model="m", voice="default", input="Hello.") as response:
        response.read()
    assert sent == [{"model": "m", "voice": "default", "input": "Hello."}] * 2
    assert parse_speech(sent[0], model_name="m", voices=VOICES, runner="v1", limits=Limits(),
                        stream_default=EXACT).stream_format == "audio"


def test_sampling_fields_are_checked_and_kept():
    assert parse(temperature=0.5, top_k=10, seed=3, max_tokens=99).sampling == {
        "temperature": 0.5, "top_k": 10, "seed": 3, "max_tokens": 99}
    assert parse(repetition_penalty=1.0).sampling == {}  # neutral values pass and are dropped


@pytest.mark.parametrize("field, value", [("temperature", -1), ("top_p", 0), ("top_k", -2), ("logprobs", 0),
                                          ("min_p", 0.2), ("max_tokens", 0), ("seed", 1.5)])
def test_out_of_range_sampling_names_the_field(field, value):
    refused(field, **{field: value})


def test_v2_message_names_the_v1_opt_out_profile():
    assert "low_latency" in refused("presence_penalty", runner="v2", presence_penalty=0.5).message


def test_empty_and_whitespace_input():
    refused("input", input="")
    refused("input", input=" \n")


def test_unknown_fields_voice_format_model():
    refused("volume", volume=1)
    refused("voice", voice="alloy")
    refused("response_format", response_format="ogg")
    assert parse(response_format="mp3").response_format == "mp3"
    refused("stream_format", stream_format="chunks")
    refused("model", model="tts-1")


@pytest.mark.parametrize("speed", [0.2499, 4.01, 0, -1, float("nan"), float("inf"), True, "fast", None])
def test_a_speed_outside_openais_range_is_refused_naming_its_range(speed):
    assert "from 0.25 to 4" in refused("speed", speed=speed).message


@pytest.mark.parametrize("speed", [0.25, 1, 1.0, 2.5, 4])
def test_a_speed_within_openais_range_is_taken(speed):
    assert parse(speed=speed).speed == speed


def test_ref_audio_must_be_base64_and_under_the_limit():
    refused("ref_audio", ref_audio="***")
    big = base64.b64encode(b"x" * (Limits().max_ref_audio_bytes + 1)).decode()
    assert "over the limit" in refused("ref_audio", ref_audio=big).message
    refused("ref_audio", voice="narrator", ref_audio=base64.b64encode(b"RIFF").decode())
    refused("ref_text", ref_text="words")


def test_body_must_be_a_json_object():
    with pytest.raises(RequestError, match="not valid JSON"):
        parse_json(b"{")
    with pytest.raises(RequestError, match="JSON object"):
        parse_json(b"[]")


def test_decode_ref_audio_reads_a_wav_and_refuses_garbage():
    data = wav_file(pcm16(np.full(2400, 0.25, dtype=np.float32)))
    samples, rate = decode_ref_audio(data, max_seconds=1.0)
    assert rate == 24000 and len(samples) == 2400
    for bad in (b"not a wav", data[:30], data[:44]):
        with pytest.raises(RequestError) as info:
            decode_ref_audio(bad, max_seconds=1.0)
        assert info.value.param == "ref_audio"
    with pytest.raises(RequestError, match="over the limit of 0.05 s"):
        decode_ref_audio(data, max_seconds=0.05)


def test_whole_wav_header_gives_exact_sizes(tmp_path):
    pcm = pcm16(np.linspace(-1, 1, 1000, dtype=np.float32))
    data = wav_file(pcm)
    header = parse_header(data)
    assert (header["data_size"], header["riff_size"], header["sample_rate"], header["bits"]) == (
        len(pcm), 36 + len(pcm), 24000, 16)
    path = tmp_path / "x.wav"
    path.write_bytes(data)
    with wave.open(str(path)) as w:
        assert (w.getnframes(), w.getframerate(), w.getsampwidth(), w.getnchannels()) == (1000, 24000, 2, 1)


def test_streamed_wav_header_is_the_unknown_length_header():
    header = parse_header(wav_header(None))
    assert header["data_size"] == header["riff_size"] == UNKNOWN_LENGTH


def test_pcm16_is_little_endian_clipped_and_rounded():
    assert pcm16(np.array([0.0, 1.0, -1.0, 2.0, 0.5], dtype=np.float32)) == struct.pack(
        "<5h", 0, 32767, -32767, 32767, 16384)


def test_a_voice_object_names_the_voice_like_its_name():
    """OpenAI's newer shape: `voice: {"id": NAME}`."""
    assert parse(voice={"id": "narrator"}) == parse(voice="narrator")
    for bad in ({"id": 3}, {"id": "narrator", "speed": 2}, {}):
        refused("voice", voice=bad)
