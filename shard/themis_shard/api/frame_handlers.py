"""Hot routes run for a peer-channel frame without the ASGI stack (``api/channel.py``): what a
handler is, how a route's work becomes one, and how it says that the route itself must answer.

A handler takes the shard and the frame's body and returns the answer's bytes (JSON unless a
:class:`TypedBody` says otherwise); a ``ThemisError`` is answered as the app would answer it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from pydantic import BaseModel, ValidationError

from ..node import ShardNode

FrameHandler = Callable[[ShardNode, bytes], Awaitable[bytes]]


class FullRequest(Exception):
    """A frame handler's input needs the route's full treatment (its validation errors)."""


class TypedBody(bytes):
    """A frame handler's answer that is not JSON: its bytes, with their content type."""

    content_type: str

    def __new__(cls, data: bytes, content_type: str) -> TypedBody:
        body = super().__new__(cls, data)
        body.content_type = content_type
        return body


def frame_handler[M: BaseModel, A](
    model: type[M],
    route: Callable[[M, ShardNode], Awaitable[A]],
    encode: Callable[[A], bytes] = orjson.dumps,
) -> FrameHandler:
    """A route's work for a peer-channel frame, without the ASGI stack: the body validated into
    the route's model (an invalid one goes to the route, which answers it with its 400), the
    answer encoded as the route encodes it (JSON unless told)."""

    async def handler(shard: ShardNode, raw: bytes) -> bytes:
        try:
            body = model.model_validate_json(raw)
        except ValidationError:
            raise FullRequest from None
        return encode(await route(body, shard))

    return handler
