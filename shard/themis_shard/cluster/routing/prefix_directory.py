"""Cluster prefix directory and pull-on-miss (paper §IV-D / §VI-D).

* ``PrefixDirectory`` (pure) — which peer holds which prefix hash (``hash → n_tokens, bytes``),
  bounded per peer (the ``prefix_announce_max`` most recently used entries) and dropped when a
  peer's listing is older than ``ttl_s``.
* ``pull_pays`` (pure) — the break-even: pull when ``rtt + bytes/net + bytes/load`` is below the
  prefill time of the tokens it saves, ``n_saved / prefill_tokens_per_s``.
* ``PrefixSync`` (I/O) — refreshes the directory from every live peer's compact listing
  (``GET /internal/kv_prefix?limit=N``: hash, n_tokens, bytes) on the gossip interval, and is the
  runtime's ``prefix_puller`` (``llm.seams.PrefixPuller``, given to ``LLMRuntime`` at
  construction): ``plan`` decides synchronously whether a request should wait for a pull; the
  returned coroutine fetches the blob with the RemoteExecutor (``expect="bytes"``) and imports it
  through the same validation as ``POST /internal/kv_prefix/import``.

The listing is pulled rather than carried in the gossip member record because that record's
schema (``gossip_state.ShardLoad``) is strict and owned by the gossip module; moving the
compact list into it is a one-field change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Holding:
    n_tokens: int
    nbytes: int


@dataclass
class PrefixDirectory:
    max_per_peer: int = 256
    ttl_s: float = 30.0
    _peers: dict[str, tuple[float, dict[str, Holding]]] = field(default_factory=dict)

    def update(self, peer: str, entries: list[dict], now: float) -> None:
        held: dict[str, Holding] = {}
        for e in entries[: self.max_per_peer]:
            try:
                h, n, b = str(e["hash"]), int(e["n_tokens"]), int(e.get("bytes", 0))
            except (KeyError, TypeError, ValueError):
                continue
            if len(h) == 32 and n > 0 and b >= 0:
                held[h] = Holding(n, b)
        self._peers[peer] = (now, held)

    def forget(self, peer: str) -> None:
        self._peers.pop(peer, None)

    def holders(self, hashes: list[str], now: float, exclude: str = "") -> list[tuple[str, str, Holding]]:
        """(peer, hash, holding) for the longest of ``hashes`` any fresh peer holds, best first
        (longest prefix, then fewest bytes)."""
        for h in reversed(hashes):
            found = [
                (peer, h, held[h])
                for peer, (t, held) in self._peers.items()
                if peer != exclude and now - t <= self.ttl_s and h in held
            ]
            if found:
                return sorted(found, key=lambda f: (-f[2].n_tokens, f[2].nbytes, f[0]))
        return []

    def holds(self, peer: str, h: str) -> bool:
        return h in self._peers.get(peer, (0.0, {}))[1]

    def size(self) -> int:
        return sum(len(held) for _, held in self._peers.values())


def pull_seconds(nbytes: int, *, net_bytes_per_s: float, load_bytes_per_s: float, rtt_s: float) -> float:
    return rtt_s + nbytes / net_bytes_per_s + nbytes / load_bytes_per_s


def pull_pays(
    n_saved_tokens: int,
    nbytes: int,
    *,
    prefill_tokens_per_s: float,
    net_bytes_per_s: float,
    load_bytes_per_s: float,
    rtt_s: float,
) -> bool:
    """§VI-D break-even: pulling ``nbytes`` must be faster than prefilling what it saves."""
    if n_saved_tokens <= 0:
        return False
    t_pull = pull_seconds(
        nbytes, net_bytes_per_s=net_bytes_per_s, load_bytes_per_s=load_bytes_per_s, rtt_s=rtt_s
    )
    return t_pull < n_saved_tokens / prefill_tokens_per_s


class PrefixSync:
    """Directory refresh + pull-on-miss for one shard (the cluster service owns it)."""

    def __init__(self, service, llm_settings) -> None:
        self.service = service
        self.s = llm_settings
        self.directory = PrefixDirectory(max_per_peer=llm_settings.prefix_announce_max)
        self.pulls = 0
        self.pull_failures = 0
        self._inflight: dict[str, asyncio.Task] = {}
        self._pushed: set[tuple[str, str]] = set()

    # -- directory ---------------------------------------------------------------------------

    async def refresh(self) -> None:
        rt = self.service.runtime
        if rt is None or not rt.ready:
            return
        states = self.service.member_states()
        peers = [p for p, st in states.items() if p != self.service.self_id and st == "alive"]
        for gone in set(self.directory._peers) - set(peers):
            self.directory.forget(gone)

        async def one(peer: str) -> None:
            try:
                body = await self.service.executor.request(
                    peer,
                    "GET",
                    "/internal/kv_prefix",
                    params={"limit": self.s.prefix_announce_max},
                    retries=0,
                    timeout_s=2.0,
                )
                self.directory.update(peer, body.get("entries", []), time.monotonic())
            except Exception as exc:  # a slow or dead peer just ages out of the directory
                log.debug("prefix listing from %s failed: %s", peer, exc)

        await asyncio.gather(*(one(p) for p in peers))
        if self.s.prefix_replicate_hits > 0:
            await self.replicate_hot(rt, peers)

    async def replicate_hot(self, rt, peers: list[str]) -> int:
        """Push every local prefix used ``prefix_replicate_hits`` times or more (hot system
        prompts) to the live peers that do not list it yet; once per (peer, prefix)."""
        from ...llm.prefix_io import export_blob

        pushed = 0
        for m in rt.models.values():
            hook = m.prefix
            if hook is None:
                continue
            for key, _, _ in hook.cache.keys():  # noqa: SIM118 - a list of (key, n, bytes), not a dict
                e = hook.cache.get(key)
                if e is None or e.hits < self.s.prefix_replicate_hits:
                    continue
                targets = [
                    p for p in peers if not self.directory.holds(p, key) and (p, key) not in self._pushed
                ]
                if not targets:
                    continue
                data = export_blob(hook, key)
                for peer in targets:
                    self._pushed.add((peer, key))
                    try:
                        await self.service.executor.post_bytes(
                            peer, "/internal/kv_prefix/import", data, params={"model": m.alias}, retries=0
                        )
                        pushed += 1
                    except Exception as exc:
                        log.info("replicating KV prefix %s to %s failed: %s", key, peer, exc)
        return pushed

    def held_for_prompt(self, prompt: str) -> dict[str, int]:
        """Router input: shard → longest held prefix of ``prompt`` (default model, as /v1/infer
        tokenizes it)."""
        rt = self.service.runtime
        if rt is None or not isinstance(prompt, str) or not prompt:
            return {}
        m = rt.model(None)
        if m.prefix is None:
            return {}
        return self.held_tokens(m, m.native.tokenize(prompt))

    def held_tokens(self, m, tokens: list[int]) -> dict[str, int]:
        """Shard → longest prefix of ``tokens`` it holds (this shard included): the input of
        ``prefix_routing.rank_with_prefix``."""
        hook = m.prefix
        if hook is None:
            return {}
        cache = hook.cache
        hashes = cache.hashes(tokens, cache.boundary(len(tokens)))
        out: dict[str, int] = {}
        local = cache.lookup(tokens, cache.boundary(len(tokens)), hashes=hashes, touch=False)
        if local is not None:
            out[self.service.self_id] = local.n_tokens
        now = time.monotonic()
        for i in range(len(hashes) - 1, -1, -1):
            for peer, _, held in self.directory.holders(hashes[: i + 1], now, exclude=self.service.self_id):
                out.setdefault(peer, held.n_tokens)
        return out

    # -- pull-on-miss ------------------------------------------------------------------------

    def plan(self, m, tokens: list[int]) -> Callable[[], Coroutine] | None:
        """Sync, on the event loop: a coroutine factory when this request should first pull a
        prefix from a peer (local miss, a peer holds a longer prefix, and it pays), else None."""
        hook = m.prefix
        if hook is None or not self.s.prefix_pull or len(tokens) <= hook.min_tokens:
            return None
        cache = hook.cache
        limit = cache.boundary(len(tokens))
        hashes = cache.hashes(tokens, limit)
        if not hashes:
            return None
        local = cache.lookup(tokens, limit, hashes=hashes, touch=False)
        have = local.n_tokens if local else 0
        found = self.directory.holders(hashes, time.monotonic(), exclude=self.service.self_id)
        if not found:
            return None
        _peer, key, held = found[0]
        if held.n_tokens <= have or not pull_pays(
            held.n_tokens - have,
            held.nbytes,
            prefill_tokens_per_s=self.s.prefix_prefill_tokens_per_s,
            net_bytes_per_s=self.s.prefix_net_bytes_per_s,
            load_bytes_per_s=self.s.prefix_load_bytes_per_s,
            rtt_s=self.s.prefix_rtt_s,
        ):
            return None
        candidates = [p for p, _, _ in found]

        async def pull() -> None:
            task = self._inflight.get(key)  # one pull per prefix, however many requests wait
            if task is None:
                task = asyncio.ensure_future(self._pull(hook, m, key, candidates))
                self._inflight[key] = task
                task.add_done_callback(lambda _t: self._inflight.pop(key, None))
            await asyncio.shield(task)

        return pull

    async def _pull(self, hook, m, key: str, peers: list[str]) -> bool:
        from ...llm.kv_blob import BlobError
        from ...llm.prefix_io import import_blob

        for peer in peers:
            try:
                data = await self.service.executor.request(
                    peer,
                    "GET",
                    f"/internal/kv_prefix/{key}",
                    params={"model": m.alias},
                    expect="bytes",
                    retries=0,
                )
                await import_blob(hook, m.engine, data, self.s.prefix_max_blob_bytes)
                self.pulls += 1
                return True
            except BlobError as exc:
                log.warning("KV prefix %s from %s refused: %s", key, peer, exc.message)
            except Exception as exc:
                log.info("KV prefix %s from %s unavailable: %s", key, peer, exc)
            self.pull_failures += 1
        return False
