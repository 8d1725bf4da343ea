"""KV-prefix export/import between shards (``/internal/kv_prefix``, paper §IV-D).

``GET /internal/kv_prefix`` lists what this shard holds, ``GET /internal/kv_prefix/{hash}``
streams one state as a binary blob (``llm/kv_blob.py``), ``POST /internal/kv_prefix/import``
takes one: fully validated (fingerprint, context settings, n_ctx, checksum, prefix hash, a trial
load) before it joins the cache; anything else is refused with a 4xx.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..errors import NotFound, PayloadTooLarge, ThemisError, Unavailable
from ..llm.kv_blob import MEDIA_TYPE, BlobError

router = APIRouter(prefix="/internal/kv_prefix", tags=["internal"], include_in_schema=False)


class ImportGate:
    """At most ``limit`` imports in progress (each buffers a blob of up to max_blob_bytes):
    one more is refused at once (429) instead of queueing its memory behind the others."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0

    def enter(self) -> None:
        if self.active >= self.limit:
            raise ThemisError(
                f"{self.active} KV-prefix imports are in progress (the limit); retry later",
                code="too_many_imports",
                status=429,
                headers={"Retry-After": "1"},
            )
        self.active += 1

    def leave(self) -> None:
        self.active -= 1


def _hook(request: Request, model: str | None):
    llm = getattr(request.app.state, "llm", None)
    if llm is None:
        raise Unavailable("the LLM runtime is not enabled", code="llm_not_ready")
    m = llm.model(model)
    hook = m.prefix
    if hook is None:
        raise Unavailable("the KV-prefix cache is disabled", code="prefix_cache_disabled")
    return hook, m, llm


@router.get("")
async def list_prefixes(request: Request, model: str | None = None, limit: int = 1024) -> dict:
    """Compact listing (most recently used first): what peers put in their prefix directory."""
    hook, m, _ = _hook(request, model)
    c = hook.cache
    return {
        "model": m.alias,
        "block": c.block,
        "bytes": c.bytes,
        "budget_bytes": c.budget_bytes,
        "entries": [{"hash": k, "n_tokens": n, "bytes": b} for k, n, b in c.keys()[: max(0, limit)]],
    }


@router.get("/{key}")
async def export_prefix(key: str, request: Request, model: str | None = None) -> Response:
    from ..llm.prefix_io import export_blob

    hook, _, _ = _hook(request, model)
    data = export_blob(hook, key)
    if data is None:
        raise NotFound(f"no KV prefix {key!r} on this shard", code="prefix_not_found")
    return Response(content=data, media_type=MEDIA_TYPE)


@router.post("/import")
async def import_prefix(request: Request, model: str | None = None) -> dict:
    from ..llm.prefix_io import import_blob

    hook, m, llm = _hook(request, model)
    gate: ImportGate = request.app.state.kv_imports
    gate.enter()
    try:
        return await _import(request, hook, m, llm, import_blob)
    finally:
        gate.leave()


async def _import(request: Request, hook, m, llm, import_blob) -> dict:
    limit = llm.settings.prefix_max_blob_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"blob exceeds {limit} bytes", code="too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"blob exceeds {limit} bytes", code="too_large")
        chunks.append(chunk)
    try:
        entry = await import_blob(hook, m.engine, b"".join(chunks), limit)
    except BlobError as exc:
        raise ThemisError(exc.message, code=exc.code, status=exc.status) from None
    return {"hash": entry.key, "n_tokens": entry.n_tokens, "bytes": entry.nbytes}
