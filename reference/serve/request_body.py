"""Request bodies read within their limits: 413 naming the setting as soon as a body passes it,
whether Content-Length says so (before a byte is read) or not (chunked, or a false length)."""

from __future__ import annotations

from fastapi import Request

from reference.serve.protocol import RequestError


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, "body", f"the request body is {declared} bytes, over the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, "body", f"the request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def limited_upload(request: Request, limit: int, audio_limit: int) -> Request:
    """The upload `request` read through a count: 413 naming 'audio_sample' as soon as the body
    passes `limit` (the WAV's limit plus room for the form), whether Content-Length says so
    (before a byte is read) or not (chunked, or a false length)."""

    def over(size: str) -> RequestError:
        return RequestError(413, "audio_sample", f"the upload is {size}, over the limit of {audio_limit} bytes for "
                                                 "'audio_sample'")

    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise over(f"{declared} bytes")
    size = 0

    async def receive():
        nonlocal size
        message = await request.receive()
        size += len(message.get("body", b""))
        if size > limit:
            raise over(f"more than {limit} bytes")
        return message

    return Request(request.scope, receive)
