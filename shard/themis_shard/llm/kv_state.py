"""One sequence's KV state out of / into a llama context, and the context settings it depends on.

llama.cpp restores a sequence state (``llama_state_seq_set_data``) without checking the model's
weights and checks the context settings only partly (§3 of ARCHITECTURE.md), so the settings a
state depends on are collected here (``kv_compat``) and travel with every exported state.
Engine-thread only: the context is not thread-safe.
"""

from __future__ import annotations

import ctypes

import llama_cpp as L

from .native import NativeContext


def kv_compat(*, kv_unified: bool = True, n_seq_max: int = 1) -> dict:
    """Context settings a saved state needs on the importing side (all must be equal, except
    ``n_ctx``, which is a lower bound the importer checks against the prefix length)."""
    p = L.llama_context_default_params()  # NativeContext keeps these defaults
    return {
        "type_k": int(p.type_k),
        "type_v": int(p.type_v),
        "flash_attn": int(p.flash_attn_type),
        "swa_full": bool(p.swa_full),
        "kv_unified": bool(kv_unified),
        "n_stream": 1 if kv_unified else int(n_seq_max),
    }


def get_seq_state(ctx: NativeContext, slot: int) -> bytes:
    size = int(L.llama_state_seq_get_size(ctx.ptr, slot))
    if size <= 0:
        return b""
    buf = (ctypes.c_uint8 * size)()
    n = int(L.llama_state_seq_get_data(ctx.ptr, buf, size, slot))
    return bytes(memoryview(buf)[:n])


def set_seq_state(ctx: NativeContext, slot: int, data: bytes, keep: int | None = None) -> bool:
    """Load ``data`` into the (empty) ``slot``; with ``keep``, drop positions ≥ keep afterwards.
    False (and the slot emptied) if llama.cpp refused it."""
    if not data:
        return False
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    n = int(L.llama_state_seq_set_data(ctx.ptr, buf, len(data), slot))
    if n == 0:
        ctx.drop_seq(slot)
        return False
    if keep is not None and not L.llama_memory_seq_rm(ctx.mem, slot, keep, -1):
        ctx.drop_seq(slot)
        return False
    return True
