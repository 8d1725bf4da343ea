"""The engine's side of the KV-prefix cache (``hooks.PrefixHook``), and how the runtime builds it.

On admission the hook restores the longest cached prefix into the sequence's slot and sets
``n_cached``; it asks the scheduler to stop the prefill at the prompt's last block boundary
(``seq.prefill_stop``), or at the last one of the part the caller says other requests share
(``seq.shared_prefix``: RAG's passages, before the question), and saves the state there. The
cache itself (``prefix_cache.PrefixCache``) is plain state; this module is where llama.cpp's
sequence states come in.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as L

from .engine import EngineConfig
from .kv_state import get_seq_state, kv_compat, set_seq_state
from .metrics import LLMMetrics
from .model import ModelFingerprint
from .native import NativeContext, NativeModel
from .prefix_cache import PrefixCache, chain_seed
from .sequence import Sequence
from .settings import LLMSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StateIdentity:
    """What a saved state depends on besides the chain seed; every exported blob carries it and
    an import must match it (``prefix_io``)."""

    fingerprint: ModelFingerprint
    compat: dict
    n_vocab: int

    def model(self) -> dict:
        fp = self.fingerprint
        return {"architecture": fp.architecture, "quantisation": fp.quantisation, "sha256": fp.sha256}


class EnginePrefixHook:
    """The engine's side of the prefix cache (``hooks.PrefixHook``); the engine calls it on its
    thread with its context. ``identity`` is what blob export/import check (None: local only)."""

    def __init__(
        self,
        cache: PrefixCache,
        *,
        min_tokens: int = 0,
        model: str = "default",
        metrics: LLMMetrics | None = None,
        identity: StateIdentity | None = None,
    ) -> None:
        self.cache = cache
        self.min_tokens = max(min_tokens, cache.block)
        self.model = model
        self.metrics = metrics
        self.identity = identity
        self.m = _handles(metrics, model, cache)
        self.saves = 0
        self.restores = 0

    def on_admit(self, ctx: NativeContext, seq: Sequence) -> None:
        """Scheduler callback: ``seq`` just got its (empty) slot and ``n_cached == 0``. Never
        raises: a failure here costs the cache, not the engine iteration."""
        try:
            self._on_admit(ctx, seq)
        except Exception:
            log.exception("KV-prefix restore failed; prefilling instead")
            seq.n_cached = 0
            seq.prefill_stop = 0
            if seq.slot is not None:
                ctx.drop_seq(seq.slot)

    def _on_admit(self, ctx: NativeContext, seq: Sequence) -> None:
        seq.prefill_stop = 0
        n_prompt = len(seq.prompt)
        # A prefix the caller says others share is worth a state from one block on; a prompt
        # nobody vouches for, from ``min_tokens``.
        shared = min(seq.shared_prefix, n_prompt - 1) if seq.shared_prefix >= self.cache.block else 0
        if (n_prompt <= self.min_tokens and not shared) or seq.adapter is not None:
            return  # a LoRA changes every layer's K/V: states are base-model only
        first = seq.preemptions == 0 and not seq.prefix_seen
        seq.prefix_seen = True
        limit = len(seq.tokens) - 1
        hit = self.cache.lookup(seq.tokens, limit)
        restored = 0
        if hit is not None:
            t0 = time.perf_counter()
            keep = hit.n_tokens if hit.n_tokens < hit.entry.n_tokens else None
            if set_seq_state(ctx, seq.slot, hit.entry.state, keep):
                restored = hit.n_tokens
                seq.n_cached = restored
                self.restores += 1
                if "restore" in self.m:
                    self.m["restore"].observe(time.perf_counter() - t0)
            else:
                log.warning("llama.cpp refused KV prefix %s: dropped", hit.entry.key)
                self.cache.remove(hit.entry.key)
        if first:
            seq.prefix_restored = restored
            if restored:
                self._inc("hits")
                self._inc("saved_tokens", restored)
            else:
                self._inc("misses")
        # Saved where the shared part ends (its last block), else at the prompt's last block.
        target = self.cache.boundary(shared + 1) if shared else self.cache.boundary(n_prompt)
        floor = self.cache.block if shared else self.min_tokens
        if target > restored and target >= floor:  # lookup is longest-first: not cached
            seq.prefill_stop = target

    def on_prefilled(self, ctx: NativeContext, seq: Sequence) -> None:
        """After a decode: if the sequence just reached its ``prefill_stop``, save the state."""
        try:
            self._on_prefilled(ctx, seq)
        except Exception:
            seq.prefill_stop = 0
            log.exception("saving a KV prefix failed")

    def _on_prefilled(self, ctx: NativeContext, seq: Sequence) -> None:
        if not seq.prefill_stop or seq.n_cached != seq.prefill_stop:
            return
        n = seq.prefill_stop
        seq.prefill_stop = 0
        state = get_seq_state(ctx, seq.slot)
        min_pos = max(0, int(L.llama_memory_seq_pos_min(ctx.mem, seq.slot)))
        if state and self.cache.put(seq.tokens[:n], state, min_pos=min_pos) is not None:
            self.saves += 1
            self._inc("saved_states")

    def on_first_token(self, seq: Sequence, ttft_s: float) -> None:
        h = self.m.get("ttft")
        if h is not None:
            h.labels(hit="true" if seq.prefix_restored else "false").observe(ttft_s)

    def _inc(self, name: str, by: float = 1) -> None:
        c = self.m.get(name)
        if c is not None:
            c.inc(by)


def _handles(metrics: LLMMetrics | None, model: str, cache: PrefixCache) -> dict:
    """The hook's metrics, labelled with its model once; publishes the cache's size."""
    if metrics is None:
        return {}
    lab = {"model": model}
    metrics.kv_prefix_cache_bytes.labels(**lab).set_function(lambda: cache.bytes)
    return {
        "hits": metrics.kv_prefix_hits.labels(**lab),
        "misses": metrics.kv_prefix_misses.labels(**lab),
        "saved_tokens": metrics.kv_prefix_saved_tokens.labels(**lab),
        "saved_states": metrics.kv_prefix_saved_states.labels(**lab),
        "restore": metrics.kv_prefix_restore_seconds.labels(**lab),
        "ttft": _Partial(metrics.kv_prefix_ttft, lab),
    }


class _Partial:
    def __init__(self, metric, labels: dict) -> None:
        self.metric, self.base = metric, labels

    def labels(self, **kw):
        return self.metric.labels(**self.base, **kw)


def build_for(
    native: NativeModel,
    config: EngineConfig,
    name: str,
    fingerprint: ModelFingerprint,
    settings: LLMSettings,
    metrics: LLMMetrics | None = None,
) -> EnginePrefixHook:
    """The runtime's entry point: the hook for engine ``name`` (pass it as ``Engine(prefix=)``),
    its cache seeded by this model and the context settings a state depends on."""
    compat = kv_compat(n_seq_max=config.limits.max_running)
    cache = PrefixCache(
        seed=chain_seed(fingerprint.sha256, settings.prefix_block_tokens, compat),
        block=settings.prefix_block_tokens,
        budget_bytes=settings.prefix_cache_bytes,
        trim=compat["swa_full"],
        swa_window=int(L.llama_model_n_swa(native.ptr)),
        disk_dir=(Path(settings.prefix_cache_dir) / name) if settings.prefix_cache_dir else None,
        disk_budget_bytes=settings.prefix_disk_bytes,
    )
    return EnginePrefixHook(
        cache,
        min_tokens=settings.prefix_min_tokens,
        model=name,
        metrics=metrics,
        identity=StateIdentity(fingerprint, compat, native.n_vocab),
    )
