"""Small ASGI pieces the pure middleware share: read a request's body and hand it on again,
and answer JSON (an error as the app's handlers render it) without a route."""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import Message, Receive, Send

from ..errors import ThemisError, error_body


async def read_body(receive: Receive) -> bytes:
    """The whole body (``receive`` may raise past a body limit: ``BodyLimitMiddleware``)."""
    chunks, more = [], True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` (already read) once, then defers to ``receive``."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def send_json(
    send: Send, status: int, payload: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


async def send_error(send: Send, exc: ThemisError) -> None:
    """``exc`` as the app's handler answers it: its status, its error body, its headers."""
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in exc.headers.items()]
    await send_json(send, exc.status, json.dumps(error_body(exc.code, exc.message)).encode(), headers)
