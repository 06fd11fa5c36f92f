"""What a request without `stream_format` (nor `stream`) gets from a running server (issue #21).

OpenAI's speech endpoint streams then, and the `openai` client names neither field unless told.
The server streams where its profile's geometry stitches exactly and answers whole where it is
lossy (reference/serve/protocol.py, StreamDefault); either way the answer names the default and
its reason in `X-Stream-Format-Default`, as `/health` does. The check asks the same greedy request
whole (`stream: false`) and compares.
"""

from __future__ import annotations

from conformance.serving.serving_client import pcm_of_wav, within

SPEECH = "/v1/audio/speech"
TTFA_COUNT = "higgs_serve_ttfa_seconds_count"


def check_default_answer(server, body: dict, expect: str, bound: dict) -> None:
    """`expect` "audio": a streamed WAV (chunked, unknown-length header, X-Sample-Rate) within
    `bound` of the whole answer, its first chunk counted in higgs_serve_ttfa_seconds; "whole": the
    whole answer byte for byte (exact header), no TTFA observed."""
    assert "stream_format" not in body and "stream" not in body, "the default is what a body without them gets"
    asked = server.client.post(SPEECH, json={**body, "stream": False})
    assert asked.status_code == 200, asked.text
    assert "x-stream-format-default" not in asked.headers, "a request that named its answer was not defaulted"
    whole = pcm_of_wav(asked.content, streamed=False)
    before = server.value(TTFA_COUNT)
    with server.client.stream("POST", SPEECH, json=body) as response:
        assert response.status_code == 200, response.read()
        headers = response.headers
        pieces = list(response.iter_raw())
    data = b"".join(pieces)
    chosen = headers.get("x-stream-format-default")
    assert chosen is not None, "an answer the server's default chose does not say so"
    assert chosen.split(";")[0] == expect, chosen
    assert chosen == server.client.get("/health").json()["stream_format_default"]
    observed = server.value(TTFA_COUNT) - before
    print(f"without stream_format: {chosen} ({len(pieces)} pieces read, {len(data)} bytes)")
    if expect == "audio":
        assert headers.get("transfer-encoding") == "chunked" and "content-length" not in headers, dict(headers)
        assert headers.get("x-sample-rate") == "24000", dict(headers)
        within(bound, pcm_of_wav(data, streamed=True), whole)
        assert observed == 1, f"higgs_serve_ttfa_seconds counted {observed:g} first chunks for one streamed answer"
    else:
        assert headers.get("content-length") == str(len(data)) and "x-sample-rate" not in headers, dict(headers)
        assert pcm_of_wav(data, streamed=False) == whole, "the defaulted whole answer differs from the one asked for"
        assert observed == 0, f"higgs_serve_ttfa_seconds counted {observed:g} streams for a whole answer"
