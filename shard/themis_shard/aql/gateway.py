"""How AQL reaches inference: the ``InferenceGateway`` protocol.

The node gives AQL the in-process pipeline (``inference.caller_gateway.CallerGateway``), so that
whatever routing the cluster applies to ``/v1/infer`` (domain hints, adapters, KV prefixes, load)
applies to AQL too, under the caller's role and tenant limits. Tests inject a fake.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ..tenants.caller import Caller


class InferenceGateway(Protocol):
    async def infer(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def infer_batch(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]: ...

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]: ...


@runtime_checkable
class CallerBound(Protocol):
    """A gateway that acts for a caller: its API-key role and its tenant's limits."""

    def for_caller(self, caller: Caller) -> InferenceGateway: ...
