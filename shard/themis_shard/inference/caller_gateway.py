"""The inference pipeline for callers inside this process: AQL's INFER, EMBED and RAG.

The same path as ``POST /v1/infer``, ``/v1/infer:batch`` and ``/v1/embed``, without HTTP to
itself: the body is validated as those routes validate it, the caller's API-key role must allow
the route (``access_policy.required_role``, decided as ``AuthMiddleware`` decides it), the
caller's tenant is admitted by the same ``TenantGate`` and charged as ``TenantMiddleware``
charges it, and the request goes to the one ``InferenceService``, which routes it to another
shard (through the one remote executor) exactly as it routes a REST request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError
from themis_core.access_policy import required_role

from ..errors import BadRequest, PayloadTooLarge, ThemisError
from ..tenants.caller import Caller
from ..tenants.charge import charge
from ..tenants.gate import TenantGate
from .local import InferRequest
from .service import InferenceService


class Forbidden(ThemisError):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="forbidden", status=403)


async def _connected() -> bool:
    """The caller's own HTTP request holds the connection; an inner call never sees it drop."""
    return False


def _request(body: dict[str, Any], where: str) -> InferRequest:
    try:
        req = InferRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise BadRequest(f"{where}{loc}: {first.get('msg')}", code="invalid_request") from None
    if req.resume is not None:
        raise BadRequest(f"{where}resume is set by the cluster's router only", code="invalid_request")
    if req.stream:
        raise BadRequest(f"{where}stream: an in-process call takes the whole answer", code="invalid_request")
    return req


@dataclass(frozen=True)
class CallerGateway:
    """``InferenceService`` behind the public routes' rules, on behalf of ``caller``."""

    service: InferenceService
    gate: TenantGate | None
    keys_on: bool
    default_max_tokens: int
    max_batch_requests: int
    metrics_open: bool = True
    caller: Caller = field(default_factory=Caller)

    def for_caller(self, caller: Caller) -> CallerGateway:
        return replace(self, caller=caller)

    def _allow(self, path: str) -> None:
        if not self.keys_on:
            return
        needed = required_role("POST", path, metrics_open=self.metrics_open)
        role = self.caller.role
        if needed is not None and (role is None or role < needed):
            have = f"the API key has the {role.name} role" if role is not None else "no API key was given"
            raise Forbidden(f"{path} needs the {needed.name} role; {have}")

    @asynccontextmanager
    async def _admitted(self, body: Any, *, generating: bool) -> AsyncIterator[None]:
        if self.gate is None:
            yield
            return
        tokens, priority = charge(body, default_max_tokens=self.default_max_tokens)
        tenant = self.caller.tenant
        await self.gate.acquire(tenant, tokens=tokens if generating else 0, priority=priority)
        try:
            yield
        finally:
            self.gate.release(tenant)

    async def infer(self, body: dict[str, Any]) -> dict[str, Any]:
        self._allow("/v1/infer")
        req = _request(body, "")
        async with self._admitted(body, generating=True):
            routed = await self.service.infer(req, _connected)
        return routed.answer

    async def infer_batch(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self._allow("/v1/infer:batch")
        if len(bodies) > self.max_batch_requests:
            raise PayloadTooLarge(
                f"at most {self.max_batch_requests} requests per batch", code="batch_too_large"
            )
        items = [_request(b, f"requests[{i}]: ") for i, b in enumerate(bodies)]
        async with self._admitted({"requests": bodies}, generating=True):
            answer = await self.service.infer_batch(
                items, stream=False, timeout_s=30.0, disconnected=_connected
            )
        assert isinstance(answer, list)  # stream=False
        return answer

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]:
        self._allow("/v1/embed")
        if model is not None:
            raise BadRequest(
                f"EMBED model {model!r}: a shard embeds with its one embedding model; leave the model out",
                code="invalid_request",
            )
        async with self._admitted(None, generating=False):
            return (await self.service.embed_texts(texts)).embeddings
