"""Export and import of KV-prefix states (the I/O edge of ``prefix_cache`` and ``kv_blob``).

``export_blob`` serialises a cached entry; ``import_blob`` validates a received blob completely
(``kv_blob.decode``), then makes one trial load into a free sequence slot on the engine thread
(positions must come back as exactly 0..n-1) before the state joins the cache. A blob that fails
anything is refused with ``BlobError`` and nothing is kept.
"""

from __future__ import annotations

import asyncio
import logging

import llama_cpp as L

from . import kv_blob
from .engine import Engine
from .kv_blob import BlobError
from .kv_state import set_seq_state
from .prefix_cache import PrefixEntry
from .prefix_hook import EnginePrefixHook, StateIdentity

log = logging.getLogger(__name__)


def _identity(hook: EnginePrefixHook) -> StateIdentity:
    if hook.identity is None:
        raise BlobError("prefix_cache_disabled", "this prefix cache does not export or import states", 503)
    return hook.identity


def expect_for(hook: EnginePrefixHook, n_ctx: int, max_bytes: int = 512 << 20) -> kv_blob.Expect:
    """What a blob must match to load into this hook's engine (context of ``n_ctx`` cells)."""
    ident = _identity(hook)
    return kv_blob.Expect(
        model=ident.model(),
        context=dict(ident.compat),
        n_ctx=n_ctx,
        n_vocab=ident.n_vocab,
        block=hook.cache.block,
        seed=hook.cache.seed,
        max_bytes=max_bytes,
    )


def export_blob(hook: EnginePrefixHook, key: str) -> bytes | None:
    e = hook.cache.get(key)
    if e is None:
        return None
    ident = _identity(hook)
    data = kv_blob.encode(
        model=ident.model(),
        context=dict(ident.compat),
        block=hook.cache.block,
        key=e.key,
        tokens=e.tokens,
        state=e.state,
    )
    _count(hook, "export", "ok", len(data))
    return data


def _trial_load(engine: Engine, n_tokens: int, state: bytes) -> int | bool | None:
    """Engine thread: load into a free slot and check the positions; returns the first position
    held (sliding-window layers), False if refused, None if no slot is free to try."""
    slot = engine.free_slot()
    if slot is None:
        return None
    ctx = engine.ctx
    try:
        if not set_seq_state(ctx, slot, state):
            log.warning("llama.cpp refused an imported KV prefix (slot %d, %d bytes)", slot, len(state))
            return False
        lo = int(L.llama_memory_seq_pos_min(ctx.mem, slot))
        hi = int(L.llama_memory_seq_pos_max(ctx.mem, slot))
        if not 0 <= lo < n_tokens or hi != n_tokens - 1:
            log.warning("imported KV prefix holds positions %d..%d, expected ..%d", lo, hi, n_tokens - 1)
            return False
        return lo
    finally:
        ctx.drop_seq(slot)


async def import_blob(hook: EnginePrefixHook, engine: Engine, data: bytes, max_bytes: int) -> PrefixEntry:
    try:
        blob = kv_blob.decode(data, expect_for(hook, engine.ctx.n_ctx, max_bytes))
        ok = await asyncio.wrap_future(engine.call(lambda: _trial_load(engine, len(blob.tokens), blob.state)))
        if ok is False:
            raise BlobError("state_rejected", "llama.cpp did not accept the state", 422)
        min_pos = ok if isinstance(ok, int) and not isinstance(ok, bool) else len(blob.tokens)
        entry = hook.cache.put(blob.tokens, blob.state, min_pos=min_pos)
        if entry is None:
            raise BlobError("too_large", "state exceeds the prefix cache budget", 413)
    except BlobError:
        _count(hook, "import", "refused", 0)
        raise
    _count(hook, "import", "ok", len(data))
    return entry


def _count(hook: EnginePrefixHook, direction: str, outcome: str, nbytes: int) -> None:
    m = hook.metrics
    if m is None:
        return
    lab = {"model": hook.model, "direction": direction}
    m.kv_prefix_transfers.labels(outcome=outcome, **lab).inc()
    if nbytes:
        m.kv_prefix_transfer_bytes.labels(**lab).inc(nbytes)
