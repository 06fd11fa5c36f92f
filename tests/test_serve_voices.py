"""Voices as a resource (`POST/GET/DELETE /v1/audio/voices`, reference/serve/voices.py) through the
app on a fake speaker whose codec encoder counts its calls (no engine): the hostile-input table
(conformance/cases/serving/voice_uploads.yaml) with nothing written outside the folder, uploads
kept across a restart and never encoded twice, a replaced or deleted voice kept by the request that
began with it, and concurrent uploads and deletes that lose nothing."""

import asyncio
import io
import itertools
import json
import wave

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from conformance import case_files
from reference.serve.app import Service, build_app
from reference.serve.metrics import ServeMetrics
from reference.serve.protocol import RequestError
from reference.serve.voices import CODES, VoiceStore, load_voices
from tests.test_serve_app import EXACT, FakeService, FakeSpeaker

CASES = case_files.load("serving/voice_uploads")


def wav(seconds: float, hz: float = 220.0, rate: int = 24000) -> bytes:
    samples = (8000 * np.sin(2 * np.pi * hz * np.arange(round(seconds * rate)) / rate)).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return buffer.getvalue()


class CountingAPI:
    """The speech API's encoder: codes from the samples' length, and a count of its calls."""

    def __init__(self):
        self.encoded = 0
        self.engine = FakeSpeaker.api.engine

    def reference_codes(self, request):
        self.encoded += 1
        return torch.full((8, 3), len(request.ref_audio) % 1000, dtype=torch.long)


def served(folder):
    speaker = FakeSpeaker(ServeMetrics())
    speaker.api = CountingAPI()
    voices = load_voices(folder)
    service = FakeService(speaker=speaker, model_name="m", runner="v1", profile="default", max_model_len=1024,
                          default_sampling={}, voices=voices, stream_default=EXACT,
                          store=VoiceStore(voices, folder) if folder is not None else None)
    return service, TestClient(build_app(service))


def upload(client, name, data, ref_text=None, **extra):
    fields = {"name": name, **({"ref_text": ref_text} if ref_text is not None else {}), **extra}
    return client.post("/v1/audio/voices", data=fields, files={"audio_sample": ("v.wav", data, "audio/wav")})


def tree(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("case", CASES["cases"], ids=lambda c: c["id"])
def test_a_hostile_upload_is_refused_naming_its_field_and_writes_nothing(case, tmp_path):
    folder = tmp_path / "voices"
    folder.mkdir()
    _, client = served(folder)
    with client:
        before = tree(tmp_path)
        data = wav(case["seconds"]) if "seconds" in case else case["data"].encode()
        name = case["name"] * case.get("repeat", 1)
        answer = upload(client, name, data, **case.get("extra", {}))
        assert answer.status_code == case["status"], answer.text
        assert answer.json()["error"]["param"] == case["param"], answer.text
        assert tree(tmp_path) == before, "an upload refused changed the folder"
        assert client.get("/v1/audio/voices").json()["voices"] == ["default"]


def test_uploads_need_a_folder_and_say_which_flag_gives_one():
    _, client = served(None)
    with client:
        answer = upload(client, "narrator", wav(1.0))
    assert answer.status_code == 400 and "--voices DIR" in answer.json()["error"]["message"]


def test_an_upload_is_encoded_once_kept_across_a_restart_and_spoken_by_name(tmp_path):
    folder = tmp_path / "voices"
    folder.mkdir()
    service, client = served(folder)
    with client:
        answer = upload(client, "narrator", wav(1.0), ref_text="A sentence.")
        assert answer.status_code == 200 and answer.json()["voice"]["name"] == "narrator", answer.text
        assert service.api.encoded == 1  # at the upload, not at the first request
        for _ in range(3):
            assert client.post("/v1/audio/speech", json={"model": "m", "input": "Hi.", "voice": "narrator"}).status_code == 200
        listing = client.get("/v1/audio/voices").json()
    assert service.api.encoded == 1
    assert listing["voices"] == ["default", "narrator"] and listing["uploaded_voices"][0]["ref_text"] == "A sentence."
    assert {p.name for p in folder.iterdir()} == {"narrator.wav", "narrator.txt", CODES}
    restarted, client = served(folder)
    with client:
        assert client.post("/v1/audio/speech", json={"model": "m", "input": "Hi.", "voice": "narrator"}).status_code == 200
    assert restarted.api.encoded == 0, "a restart encoded a voice whose codes it kept"
    assert restarted.voices["narrator"].ref_text == "A sentence."


def test_a_request_keeps_the_voice_it_began_with_when_it_is_replaced_or_deleted(tmp_path):
    folder = tmp_path / "voices"
    folder.mkdir()
    service, client = served(folder)

    async def race():
        await service.store.upload("narrator", wav(1.0), None)
        old = service.voices["narrator"]
        body = type("Body", (), {"voice": "narrator", "ref_audio": None, "ref_text": None, "text": "Hi.",
                                 "sampling": {}})()
        service.check_length = lambda request: 0  # the fake API builds no prompt
        started = asyncio.ensure_future(Service.speech_request(service, body))  # the real one, not the fake's
        await asyncio.sleep(0)  # the request has taken its voice
        await service.store.upload("narrator", wav(2.0), None)  # replaced
        await service.store.delete("narrator")  # and deleted
        request, _ = await started
        return old, request

    with client:
        old, request = asyncio.run(race())
    assert torch.equal(request.ref_codes, service._voice_codes[old.digest])
    assert "narrator" not in service.voices and not (folder / "narrator.wav").exists()


def test_uploads_deletes_and_requests_at_once_lose_nothing_and_leave_one_file_per_voice(tmp_path):
    folder = tmp_path / "voices"
    folder.mkdir()
    service, client = served(folder)

    service.check_length = lambda request: 0  # the fake API builds no prompt

    async def speak(name):
        body = type("Body", (), {"voice": name, "ref_audio": None, "ref_text": None, "text": "Hi.", "sampling": {}})()
        try:
            request, _ = await Service.speech_request(service, body)
            return request.ref_codes is not None
        except RequestError as exc:  # deleted before this request took it: the documented answer
            assert exc.status == 400 and exc.param == "voice", exc.message
            return None

    async def storm():
        names = [f"v{n}" for n in range(8)]
        await asyncio.gather(*(service.store.upload(n, wav(0.5 + 0.1 * i), None) for i, n in enumerate(names)))
        spoken = await asyncio.gather(*(service.store.upload(n, wav(0.3), None) for n in names[:4]),
                                      *(service.store.delete(n) for n in names[4:]),
                                      *(speak(n) for n in names for _ in range(3)))
        return names, spoken[8:]

    with client:
        names, spoken = asyncio.run(storm())
        listing = client.get("/v1/audio/voices").json()
    assert all(s is not False for s in spoken) and spoken[:12].count(True) == 12  # the replaced voices always speak
    assert listing["voices"] == ["default", *names[:4]]
    assert sorted(p.name for p in folder.glob("*.wav")) == [f"{n}.wav" for n in names[:4]]
    assert not list(folder.glob(".upload-*")), "a temporary file was left behind"


def test_a_duplicate_name_replaces_the_voice_and_keeps_one_file(tmp_path):
    folder = tmp_path / "voices"
    folder.mkdir()
    service, client = served(folder)
    with client:
        first = upload(client, "narrator", wav(1.0), ref_text="One.").json()["voice"]
        second = upload(client, "narrator", wav(2.0)).json()["voice"]
        listing = client.get("/v1/audio/voices").json()
    assert second["file_size"] > first["file_size"] and listing["uploaded_voices"] == [second]
    assert sorted(p.name for p in folder.iterdir()) == [CODES, "narrator.wav"]  # the old transcript went too
    assert len(list((folder / CODES).iterdir())) == 1 and service.api.encoded == 2  # the old codes went


def test_delete_answers_404_for_an_unknown_voice_and_400_for_the_default(tmp_path):
    folder = tmp_path / "voices"
    folder.mkdir()
    _, client = served(folder)
    with client:
        assert client.delete("/v1/audio/voices/nobody").status_code == 404
        assert client.delete("/v1/audio/voices/default").status_code == 400
        upload(client, "narrator", wav(1.0))
        assert client.delete("/v1/audio/voices/narrator").json()["success"] is True
        assert client.get("/v1/audio/voices").json()["voices"] == ["default"]
    assert not (folder / "narrator.wav").exists()


def test_a_name_the_store_checks_is_never_a_path():
    for bad in ("../x", "a/b", "a\\b", ".hidden", "", "x" * 65, "näme", "default", None, 3):
        with pytest.raises(RequestError) as info:
            VoiceStore.check_name(bad)
        assert info.value.param == "name"


def test_a_bad_or_outside_file_in_the_folder_is_skipped_with_a_warning_naming_it(tmp_path, caplog):
    folder, outside = tmp_path / "voices", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()
    (folder / "good.wav").write_bytes(wav(0.5))
    (folder / "garbage.wav").write_bytes(b"RIFF\x00\x00")
    (folder / "empty.wav").write_bytes(b"")
    (outside / "secret.wav").write_bytes(wav(0.5))
    (outside / "secret.txt").write_text("a transcript from outside")
    (folder / "linked.wav").symlink_to(outside / "secret.wav")
    (folder / "texted.wav").write_bytes(wav(0.5))
    (folder / "texted.txt").symlink_to(outside / "secret.txt")
    with caplog.at_level("WARNING", logger="higgs_ref.serve"):
        voices = load_voices(folder)
    assert sorted(voices) == ["default", "good"]
    warned = "\n".join(r.getMessage() for r in caplog.records)
    for name in ("garbage.wav", "empty.wav", "linked.wav", "texted.wav"):
        assert f"{folder / name} skipped" in warned, warned


def _asgi_upload(app, chunks, headers=()):
    """POST /v1/audio/voices straight into the ASGI app with a body of `chunks` (no Content-Length
    unless given): (status, JSON body, chunks the app took)."""
    taken, sent = 0, []

    async def receive():
        nonlocal taken
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        taken += 1
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/audio/voices", "raw_path": b"/v1/audio/voices", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"multipart/form-data; boundary=b"), *headers],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")), taken


@pytest.mark.parametrize("declared", [False, True], ids=["chunked", "false_length"])
def test_an_upload_is_refused_while_it_is_read_with_or_without_content_length(tmp_path, declared):
    folder = tmp_path / "voices"
    folder.mkdir()
    service, _ = served(folder)
    piece = 64 << 10
    head = (b'--b\r\nContent-Disposition: form-data; name="audio_sample"; filename="v.wav"\r\n'
            b"Content-Type: audio/wav\r\n\r\n")
    chunks = itertools.chain([head], (b"\x00" * piece for _ in range(200)))  # 12.5 MiB, three times the limit
    status, body, taken = _asgi_upload(build_app(service), chunks,
                                       [(b"content-length", b"100")] if declared else [])
    assert status == 413 and body["error"]["param"] == "audio_sample", body
    assert taken * piece <= service.store.max_bytes + (64 << 10) + 2 * piece, f"{taken} chunks read before the 413"
    assert not list(folder.iterdir())


def test_an_empty_upload_and_a_missing_name_say_what_to_send(tmp_path):
    folder = tmp_path / "voices"
    folder.mkdir()
    _, client = served(folder)
    with client:
        empty = client.post("/v1/audio/voices", data={"name": "x"}, files={"audio_sample": ("v.wav", b"", "audio/wav")})
        nameless = client.post("/v1/audio/voices", files={"audio_sample": ("v.wav", wav(0.5), "audio/wav")})
    assert empty.status_code == 400 and empty.json()["error"]["message"] == "'audio_sample' is empty: send a WAV file"
    assert nameless.status_code == 400 and nameless.json()["error"]["param"] == "name"
    assert nameless.json()["error"]["message"].startswith("'name' is required"), nameless.text


def test_an_unknown_voice_error_names_a_few_voices_and_their_count(tmp_path):
    folder = tmp_path / "voices"
    folder.mkdir()
    for n in range(40):
        (folder / f"voice{n:02d}.wav").write_bytes(wav(0.2))
    _, client = served(folder)
    with client:
        answer = client.post("/v1/audio/speech", json={"model": "m", "input": "Hi.", "voice": "alloy"})
        gone = client.delete("/v1/audio/voices/alloy")
    for reply in (answer, gone):
        message = reply.json()["error"]["message"]
        assert "this server knows 41: 'default', 'voice00', 'voice01' and 38 more" in message, message
        assert len(message) < 160 and "voice39" not in message, message
