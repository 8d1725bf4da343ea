"""How AQL reaches inference: through the shard's own public HTTP API, so that whatever routing
the cluster applies to ``/v1/infer`` (domain hints, adapters, load) applies to AQL too.

The executor depends on the :class:`InferenceGateway` protocol only; tests inject a fake.
"""

from __future__ import annotations

from typing import Any, Protocol

import httpx

from ..errors import ThemisError, Unavailable


class InferenceGateway(Protocol):
    async def infer(self, body: dict[str, Any]) -> dict[str, Any]: ...

    async def infer_batch(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]: ...

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]: ...


class HttpGateway:
    """Loopback calls to ``/v1/infer``, ``/v1/infer:batch`` and ``/v1/embed``.

    4xx answers and a shard's own 503 refusals (``llm_disabled``, ``llm_not_ready``) are relayed
    unchanged (code, message, status); no answer or another 5xx is a 503 ``inference_unavailable``.
    One short-lived client per query: loopback connects are cheap next to inference.
    ``headers`` go with every call: ``for_caller`` carries the query's own ``Authorization``, so
    with API keys on, AQL's inference runs with the caller's key (and role), never a key of its own.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 300.0,
        verify: Any = True,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.verify = verify
        self.transport = transport
        self.headers = headers or {}

    def for_caller(self, authorization: str | None) -> HttpGateway:
        """This gateway sending the caller's ``Authorization`` header (itself when there is none)."""
        if not authorization:
            return self
        return HttpGateway(
            self.base_url,
            timeout_s=self.timeout_s,
            verify=self.verify,
            transport=self.transport,
            headers={**self.headers, "Authorization": authorization},
        )

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self.timeout_s,
                verify=self.verify,
                transport=self.transport,
                headers=self.headers,
            ) as client:
                response = await client.post(path, json=body)
        except httpx.HTTPError as exc:
            raise Unavailable(
                f"inference call {path} failed: {type(exc).__name__}", code="inference_unavailable"
            ) from None
        try:
            payload = response.json()
        except ValueError:
            payload = None
        err = payload.get("error") if isinstance(payload, dict) else None
        if response.status_code == 503 and isinstance(err, dict) and isinstance(err.get("code"), str):
            # a deliberate refusal (the model is loading, or this shard runs none): relayed by name
            raise Unavailable(err.get("message") or f"{path} is unavailable", code=err["code"])
        if response.status_code >= 500 or not isinstance(payload, dict):
            raise Unavailable(
                f"inference call {path} answered {response.status_code}", code="inference_unavailable"
            )
        if response.status_code >= 400:
            err = payload.get("error") or {}
            raise ThemisError(
                err.get("message") or f"{path} refused the request",
                code=err.get("code") or "inference_error",
                status=response.status_code,
            )
        return payload

    async def infer(self, body: dict[str, Any]) -> dict[str, Any]:
        return await self._post("/v1/infer", body)

    async def infer_batch(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return (await self._post("/v1/infer:batch", {"requests": bodies}))["results"]

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]:
        body: dict[str, Any] = {"texts": texts}
        if model is not None:
            body["model"] = model
        return (await self._post("/v1/embed", body))["embeddings"]
