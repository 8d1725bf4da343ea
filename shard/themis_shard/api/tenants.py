"""Tenants at the HTTP edge: a pure-ASGI middleware in front of the inference routes.

It runs after ``AuthMiddleware`` (which puts the key's tenant in ``scope["state"]``), reads the
body once to learn what the request asks for (``priority``, ``max_tokens`` × ``n``), asks the
node's ``TenantGate`` for admission, and holds the tenant's slot until the response, streamed
or not, has been sent. The body is then replayed to the route unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from themis_core.tenant_policy import DEFAULT_TENANT

from ..errors import ThemisError, error_body
from ..tenants.gate import TenantGate

#: POST routes that run the engine; the embedding ones generate no tokens (charged 0).
GENERATING = ("/v1/infer", "/v1/completions", "/v1/chat/completions", "/v1/rag")
EMBEDDING = ("/v1/embed", "/v1/embeddings")


def _under(path: str, prefix: str) -> bool:
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] in "/:")


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def charge(body: Any, *, default_max_tokens: int) -> tuple[int, int]:
    """(tokens charged, highest priority asked) of a generation body: ``max_completion_tokens``
    or ``max_tokens`` (the engine's default when absent) × ``n``, summed over an
    ``/v1/infer:batch`` body's ``requests``. A malformed field counts as absent; the route
    itself refuses it by name."""
    if not isinstance(body, dict):
        return default_max_tokens, 0
    items = body.get("requests")
    if isinstance(items, list) and items:
        parts = [charge(item, default_max_tokens=default_max_tokens) for item in items]
        return sum(t for t, _ in parts), max(p for _, p in parts)
    budget = _int(body.get("max_completion_tokens"), 0) or _int(body.get("max_tokens"), default_max_tokens)
    return max(1, budget) * max(1, _int(body.get("n"), 1)), _int(body.get("priority"), 0)


def _priority(body: Any) -> int:
    return _int(body.get("priority"), 0) if isinstance(body, dict) else 0


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
        messages: list[Message] = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        try:
            body = json.loads(b"".join(m.get("body", b"") for m in messages) or b"null")
        except (ValueError, UnicodeDecodeError):
            body = None  # the route answers the malformed body by name
        if generating:
            tokens, priority = charge(body, default_max_tokens=self.default_max_tokens)
        else:
            tokens, priority = 0, _priority(body)
        try:
            await self.gate.acquire(tenant, tokens=tokens, priority=priority)
        except ThemisError as exc:
            await _reply(send, exc)
            return

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        try:
            await self.app(scope, replay, send)
        finally:
            self.gate.release(tenant)


async def _reply(send: Send, exc: ThemisError) -> None:
    payload = json.dumps(error_body(exc.code, exc.message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in exc.headers.items()]
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
