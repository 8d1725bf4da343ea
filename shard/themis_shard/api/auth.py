"""API keys at the HTTP edge: a pure-ASGI middleware in front of every router.

It runs before routing and before the body is read, so a request without a valid key costs
nothing and no route, whoever adds it, escapes the policy (``auth.policy``). 401 (no key, or an
unknown one) and 403 (a key whose role may not) carry the standard error body and a
``WWW-Authenticate: Bearer`` challenge (RFC 6750).
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send
from themis_core.access_policy import required_role
from themis_core.api_keys import KeyRing, bearer_token

from ..errors import error_body
from .openapi import error_response


class AuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        ring: KeyRing,
        *,
        metrics_open: bool,
        docs_open: bool = False,
        realm: str = "themis",
    ) -> None:
        self.app = app
        self.ring = ring
        self.metrics_open = metrics_open
        self.docs_open = docs_open
        self.realm = realm

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        needed = required_role(
            scope.get("method", "GET"),
            scope.get("path", ""),
            metrics_open=self.metrics_open,
            docs_open=self.docs_open,
        )
        if needed is None:
            await self.app(scope, receive, send)
            return
        header = next(
            (v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"authorization"), None
        )
        token = bearer_token(header)
        if token is None:
            await self._refuse(
                send, 401, "unauthorized", "an API key is required: Authorization: Bearer <key>", ""
            )
            return
        entry = self.ring.entry_of(token)
        if entry is None:
            await self._refuse(send, 401, "invalid_api_key", "the API key is not valid", "invalid_token")
            return
        role = entry.role
        if role < needed:
            await self._refuse(
                send,
                403,
                "forbidden",
                f"this route needs the {needed.name} role; the API key has the {role.name} role",
                "insufficient_scope",
            )
            return
        state = scope.setdefault("state", {})
        state["tenant"] = entry.tenant  # for TenantMiddleware
        state["role"] = role  # for in-process calls made on the caller's behalf (AQL's inference)
        await self.app(scope, receive, send)

    async def _refuse(self, send: Send, status: int, code: str, message: str, error: str) -> None:
        challenge = f'Bearer realm="{self.realm}"' + (f', error="{error}"' if error else "")
        body = json.dumps(error_body(code, message)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", challenge.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def document_security(schema: dict, *, metrics_open: bool) -> dict:
    """The OpenAPI schema with the bearer scheme and, per operation, its security, the role it
    needs (``x-themis-role``) and its 401/403, read from the same policy the middleware enforces."""
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})["bearer"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "an API key (roles: client, admin)",
    }
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict):
                continue
            role = required_role(method, path, metrics_open=metrics_open)
            if role is not None:
                operation["security"] = [{"bearer": []}]
                operation["x-themis-role"] = role.name
                responses = operation.setdefault("responses", {})
                for status in (401, 403):
                    responses.setdefault(str(status), error_response(status))
    return schema
