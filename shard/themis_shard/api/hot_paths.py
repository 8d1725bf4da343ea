"""The plain document PUT and GET, and transactions, served without FastAPI's routing and
dependency resolution.

py-spy on a shard under 16 writers put a third of its event loop in the framework between the
middleware and the route (matching ~150 routes, solving dependencies, validating the answer
against its response model) — several times the route's own work. This innermost middleware
takes the plain case of the two hottest routes — ``PUT`` with a JSON object body and at most
``?w=``, ``GET`` without a query — and calls the functions the routes call (``put_one``,
``get_one``), under every middleware the routes run under (access log, metrics, API keys,
body limit). ``POST /v1/transactions`` with a JSON body that its model accepts as it stands
runs ``transact`` the same way. Anything else — another parameter, ``If-Match``, a body that
is not a JSON object or that the model refuses, a shard still starting — goes on to the routes,
which answer it exactly as before; errors are rendered as the app's handlers render them.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Literal

import orjson
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError
from starlette.types import ASGIApp, Receive, Scope, Send

from ..cluster.replication.fencing import DEFAULT_CONCERN, WriteConcern
from ..errors import ThemisError, error_body, lone_surrogate
from ..node import ShardNode
from .asgi import read_body, replaying, send_error, send_json
from .documents import TransactionRequest, get_one, put_one, transact

log = logging.getLogger(__name__)

TEMPLATE = "/v1/collections/{collection}/documents/{key}"
_PATH = re.compile(r"/v1/collections/([^/]+)/documents/([^/]+)")
_CONCERNS = {
    b"": None,
    b"w=1": WriteConcern.ONE,
    b"w=majority": WriteConcern.MAJORITY,
    b"w=all": WriteConcern.ALL,
}


class RouteLabel:
    """What the access log and the metrics read of a matched route: its template."""

    def __init__(self, path: str, name: str) -> None:
        self.path = path
        self.name = name


PUT_ROUTE = RouteLabel(TEMPLATE, "put_document")
GET_ROUTE = RouteLabel(TEMPLATE, "get_document")
TXN_PATH = "/v1/transactions"
TXN_ROUTE = RouteLabel(TXN_PATH, "transaction")


class HotDocumentPaths:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method")
        if scope["type"] != "http" or method not in ("PUT", "GET", "POST"):
            await self.app(scope, receive, send)
            return
        if method == "POST":
            shard = getattr(scope["app"].state, "node", None) if scope["path"] == TXN_PATH else None
            if shard is None:
                await self.app(scope, receive, send)
            else:
                await self._transaction(scope, receive, send, shard)
            return
        match = _PATH.fullmatch(scope["path"])
        shard = getattr(scope["app"].state, "node", None) if match else None
        if shard is None:  # another path, or a shard still starting (the route says so)
            await self.app(scope, receive, send)
            return
        collection, key = match.groups()
        if method == "GET":
            await self._get(scope, receive, send, shard, collection, key)
        else:
            await self._put(scope, receive, send, shard, collection, key)

    async def _get(
        self, scope: Scope, receive: Receive, send: Send, shard: ShardNode, collection: str, key: str
    ) -> None:
        if scope.get("query_string"):
            await self.app(scope, receive, send)
            return
        scope["route"] = GET_ROUTE
        try:
            found = await get_one(shard, collection, key)
            body = found.model_dump_json().encode()
        except PydanticSerializationError:
            await self.app(scope, receive, send)  # the route's handlers answer it (a read: safe to redo)
            return
        except Exception as exc:
            await _error(send, exc)
            return
        await send_json(send, 200, body)

    async def _put(
        self, scope: Scope, receive: Receive, send: Send, shard: ShardNode, collection: str, key: str
    ) -> None:
        concern = _plain_json(scope)
        if concern is False or _header(scope, b"if-match") is not None:
            await self.app(scope, receive, send)
            return
        raw = await read_body(receive)
        document = _json(raw)
        if not isinstance(document, dict):  # the route's validation answers it
            await self.app(scope, replaying(raw, receive), send)
            return
        scope["route"] = PUT_ROUTE
        try:
            result = await put_one(shard, collection, key, document, concern or DEFAULT_CONCERN)
        except Exception as exc:
            await _error(send, exc)
            return
        await send_json(send, 200, result.model_dump_json().encode())

    async def _transaction(self, scope: Scope, receive: Receive, send: Send, shard: ShardNode) -> None:
        concern = _plain_json(scope)
        if concern is False:
            await self.app(scope, receive, send)
            return
        raw = await read_body(receive)
        try:
            body = TransactionRequest.model_validate(_json(raw))
        except ValidationError:  # the route's validation answers it, with its codes
            await self.app(scope, replaying(raw, receive), send)
            return
        scope["route"] = TXN_ROUTE
        try:
            result = await transact(shard, body, concern or DEFAULT_CONCERN)
        except Exception as exc:
            await _error(send, exc)
            return
        await send_json(send, 200, result.model_dump_json().encode())


def _plain_json(scope: Scope) -> WriteConcern | Literal[False] | None:
    """The write concern of a request with a JSON body and at most ``?w=`` (None: the default),
    or False for anything else (the route answers it)."""
    concern = _CONCERNS.get(scope.get("query_string", b""), False)
    content_type = _header(scope, b"content-type")
    if content_type is None or content_type.split(b";")[0].strip().lower() != b"application/json":
        return False
    return concern


def _json(raw: bytes) -> object:
    """The body as the route parses it (orjson would round big integers); None if it is not JSON."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _header(scope: Scope, name: bytes) -> bytes | None:
    for k, v in scope.get("headers", ()):
        if k == name:
            return v
    return None


async def _error(send: Send, exc: Exception) -> None:
    """The answer ``api/errors.py``'s handlers give for ``exc``."""
    if isinstance(exc, UnicodeEncodeError) and (bad := lone_surrogate(exc)) is not None:
        exc = bad
    if isinstance(exc, ThemisError):
        await send_error(send, exc)
        return
    log.exception("unhandled error", exc_info=exc)
    await send_json(
        send, 500, orjson.dumps(error_body("internal", "internal error")), [(b"connection", b"close")]
    )
