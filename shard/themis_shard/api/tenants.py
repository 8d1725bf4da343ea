"""Tenants at the HTTP edge: a pure-ASGI middleware in front of the inference routes.

It runs after ``AuthMiddleware`` (which puts the key's tenant in ``scope["state"]``), reads the
body once to learn what the request asks for (``priority``, ``max_tokens`` × ``n``), asks the
node's ``TenantGate`` for admission, and holds the tenant's slot until the response, streamed
or not, has been sent. The body is then replayed to the route unchanged.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send
from themis_core.tenant_policy import DEFAULT_TENANT

from ..errors import ThemisError
from ..tenants.charge import charge, priority
from ..tenants.gate import TenantGate
from .asgi import read_body, replaying, send_error

#: POST routes that run the engine; the embedding ones generate no tokens (charged 0).
GENERATING = ("/v1/infer", "/v1/completions", "/v1/chat/completions", "/v1/rag")
EMBEDDING = ("/v1/embed", "/v1/embeddings")


def _under(path: str, prefix: str) -> bool:
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] in "/:")


class TenantMiddleware:
    def __init__(self, app: ASGIApp, gate: TenantGate, *, default_max_tokens: int) -> None:
        self.app = app
        self.gate = gate
        self.default_max_tokens = default_max_tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        generating = any(_under(path, p) for p in GENERATING)
        if scope.get("method") != "POST" or not (generating or any(_under(path, p) for p in EMBEDDING)):
            await self.app(scope, receive, send)
            return
        tenant = (scope.get("state") or {}).get("tenant") or DEFAULT_TENANT
        raw = await read_body(receive)
        try:
            body = json.loads(raw or b"null")
        except (ValueError, UnicodeDecodeError):
            body = None  # the route answers the malformed body by name
        if generating:
            tokens, priority_ = charge(body, default_max_tokens=self.default_max_tokens)
        else:
            tokens, priority_ = 0, priority(body)
        try:
            await self.gate.acquire(tenant, tokens=tokens, priority=priority_)
        except ThemisError as exc:
            await send_error(send, exc)
            return
        try:
            await self.app(scope, replaying(raw, receive), send)
        finally:
            self.gate.release(tenant)
