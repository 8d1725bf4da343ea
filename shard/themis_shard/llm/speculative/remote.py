"""Remote draft shard: ``/internal/draft`` on a (small, fast) draft shard, ``RemoteDraft`` on the
verify shard.

Protocol (JSON, one POST per speculative round)::

    → {"rid": "…", "pos": n, "tokens": [context[n:]], "k": 4,
       "temperature": 0.7, "top_k": 0, "top_p": 1.0, "seed": 1}
    ← {"tokens": [x_1..x_m], "q": null | [{"ids": [...], "probs": [...]}, ...]}

``pos`` is how much of the context the draft shard already holds for this request (the verified
prefix it was sent before); it truncates its copy to ``pos`` — that is the rollback of rejected
draft tokens — appends the delta and drafts m ≤ k tokens. ``q`` is null for greedy requests
(every draft token is a point mass); otherwise the draft samples each token from its own
distribution under the request's temperature / top-p with top-k capped at ``Q_SUPPORT`` (64),
and sends exactly that truncated distribution (ids + float32 probs, ≈ 0.5 KB per token): the q
the verify shard divides by is the q the token was drawn from, so the rejection rule stays exact
(see ``rejection.py``). ``DELETE /internal/draft/{rid}`` frees the request's draft state; idle
states are evicted LRU past ``max_states``.

``RemoteDraft`` raises ``DraftUnavailable`` on any failure or timeout, when no draft shard is
known, or at once when the cluster's circuit breaker for the draft shard is open; the speculator
then counts a ``draft_error`` fallback and decodes locally (probing again after a back-off).
Which shard drafts: a fixed URL (``THEMIS_LLM_DRAFT_URL``), a named cluster shard, or ``auto`` —
the least-loaded live peer that gossips ``draft_of`` = this shard's model
(``cluster/membership/draft_shard.py``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ssl
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from ..compute_threads import Runner
from ..sampling import SamplingParams
from .drafts import Draft, DraftUnavailable
from .rejection import Dist

Q_SUPPORT = 64


@dataclass(slots=True)
class _Remote:
    tokens: list[int] = field(default_factory=list)


class DraftService:
    """Server side: per-request context copies in front of a ``LocalDraftModel`` (thread-safe).
    Its drafting runs through ``run``: the shard's engine thread, else one thread of its own,
    never a pool of threads (``compute_threads`` says why)."""

    def __init__(self, source, *, max_states: int = 64, runner: Runner | None = None) -> None:
        """``runner``: where drafting runs (an engine's ``call``); None: a thread of its own."""
        self.source = source
        if runner is None:
            runner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llm-draft").submit
        self.run: Runner = runner
        self.max_states = max_states
        self._lock = threading.Lock()
        self._states: OrderedDict[str, _Remote] = OrderedDict()
        #: measured seconds per drafted token (EWMA), published by ``info`` so verify shards
        #: can judge this draft shard before paying for a first probe
        self.token_s: float | None = None

    def draft(self, rid: str, pos: int, delta: list[int], k: int, params: SamplingParams) -> dict:
        with self._lock:
            st = self._states.get(rid)
            if st is None:
                if pos != 0:
                    raise LookupError("unknown request: resend the whole context (pos 0)")
                st = self._states[rid] = _Remote()
                while len(self._states) > self.max_states:
                    old, _ = self._states.popitem(last=False)
                    self.source.release(old)
            self._states.move_to_end(rid)
            if pos > len(st.tokens):
                raise LookupError("pos beyond the context held")
            st.tokens = st.tokens[:pos] + list(delta)
            if not params.greedy:
                params = replace(params, top_k=min(params.top_k or Q_SUPPORT, Q_SUPPORT))
            t0 = time.perf_counter()
            d = self.source.propose(rid, st.tokens, k, params)
            if d.tokens and len(delta) <= 2 * k:  # a steady-state round, not a first prefill
                per = (time.perf_counter() - t0) / len(d.tokens)
                self.token_s = per if self.token_s is None else 0.8 * self.token_s + 0.2 * per
        q = None if params.greedy else [x.to_wire() for x in d.q]
        return {"tokens": d.tokens, "q": q}

    def release(self, rid: str) -> None:
        with self._lock:
            if self._states.pop(rid, None) is not None:
                self.source.release(rid)

    def info(self) -> dict:
        return {
            "model_bytes": int(getattr(self.source, "model_bytes", 0)),
            "draft_of": (getattr(self.source, "info", None) or {}).get("of_sha256", ""),
            "token_s": self.token_s,
        }


@dataclass(frozen=True, slots=True)
class DraftTarget:
    """Where drafts come from right now: a URL, and when it is a cluster peer its id, the
    cluster's circuit breaker for it (shared with every other call to that peer: an open breaker
    costs no connect attempt) and the cluster's client TLS context (``/internal`` is mTLS)."""

    url: str
    peer: str = ""
    breaker: Any = None  # cluster.breaker.CircuitBreaker
    ssl_context: ssl.SSLContext | None = None
    auth: Any = None  # an httpx.Auth signing the cluster's /internal calls (cluster.peer_auth)


#: Where a remote draft source should ask now (the cluster's choice of draft shard).
Resolver = Callable[[], "DraftTarget | None"]
DraftResolver = Resolver


class RemoteDraft:
    """Client side (verify shard): a draft source backed by a draft shard's ``/internal/draft``.

    ``target`` is a URL or a resolver asked before every round (the cluster's choice of draft
    shard may change as shards come and go). Thread-safe: the engine may draft several
    sequences' rounds in parallel (``concurrent``), each key being touched by one thread at a time.
    """

    name = "remote"
    per_token_cost = False  # a round trip dominates
    deterministic = False
    concurrent = True  # I/O bound: the engine may fetch several sequences' drafts at once

    def __init__(
        self,
        target: str | Resolver,
        *,
        timeout_s: float = 0.25,
        headers: dict | None = None,
    ) -> None:
        if isinstance(target, str):
            fixed = DraftTarget(target)
            self._resolve: Resolver = lambda: fixed
        else:
            self._resolve = target
        self.timeout_s = timeout_s
        self._headers = headers or {}
        self._clients: dict[int, Any] = {}  # one pooled client per TLS context
        self._lock = threading.Lock()
        self._client_id = uuid.uuid4().hex[:12]
        #: per key: (url, context the draft shard holds for it)
        self._sent: dict[Hashable, tuple[str, list[int]]] = {}

    @property
    def url(self) -> str:
        t = self._resolve()
        return t.url if t else ""

    def _client(self, target: DraftTarget):
        key = (id(target.ssl_context), id(target.auth))
        with self._lock:
            c = self._clients.get(key)
            if c is None:
                c = self._clients[key] = httpx.Client(
                    timeout=self.timeout_s,
                    headers=self._headers,
                    verify=target.ssl_context if target.ssl_context is not None else True,
                    auth=target.auth,
                    trust_env=False,
                )
        return c

    def _rid(self, key: Hashable) -> str:
        return f"{self._client_id}-{getattr(key, 'rid', id(key))}"

    def _call(self, call: Callable[[DraftTarget, str, Any], Any]) -> Any:
        """Run ``call(target, base_url, client)`` against the current draft shard through the
        cluster's breaker for it; DraftUnavailable when there is none, it is open or it failed."""
        target = self._resolve()
        if target is None:
            raise DraftUnavailable("no draft shard available")
        breaker = target.breaker
        if breaker is not None and not breaker.allow():
            raise DraftUnavailable(f"draft shard {target.peer or target.url}: circuit open")
        url = target.url.rstrip("/")
        try:
            out = call(target, url, self._client(target))
        except Exception as exc:
            if breaker is not None:
                breaker.record_failure()
            raise DraftUnavailable(f"draft shard {target.peer or url}: {exc}") from exc
        if breaker is not None:
            breaker.record_success()
        return out

    def propose(self, key: Hashable, tokens: list[int], k: int, params) -> Draft:
        def post(target: DraftTarget, url: str, http) -> tuple[str, dict]:
            prev_url, sent = self._sent.get(key, ("", []))
            n = 0
            if prev_url == url:  # another draft shard holds nothing of this request
                lim = min(len(sent), len(tokens))
                while n < lim and sent[n] == tokens[n]:
                    n += 1
            body = {
                "rid": self._rid(key),
                "pos": n,
                "tokens": tokens[n:],
                "k": k,
                "temperature": params.temperature,
                "top_k": params.top_k,
                "top_p": params.top_p,
                "seed": params.seed,
            }
            r = http.post(f"{url}/internal/draft", json=body)
            if r.status_code == 409 and n:  # the draft shard lost our state: resend everything
                body.update(pos=0, tokens=list(tokens))
                r = http.post(f"{url}/internal/draft", json=body)
            r.raise_for_status()
            return url, r.json()

        try:
            url, data = self._call(post)
        except DraftUnavailable:
            self._sent.pop(key, None)
            raise
        self._sent[key] = (url, list(tokens))
        toks = [int(t) for t in data["tokens"]][:k]
        if data.get("q") is None:
            q = [Dist.point(t) for t in toks]
        else:
            q = [Dist.from_wire(d) for d in data["q"][: len(toks)]]
        return Draft(toks, q)

    def commit(self, key: Hashable, tokens: list[int]) -> None:
        pass  # the next propose sends pos = the common prefix: that is the rollback

    def expected_token_s(self, target_decode_s: float, target_bytes: int) -> float | None:
        """What the draft shard measured per drafted token (its own hardware), else its draft
        model's size ratio × a local decode; None when it cannot be asked."""

        def get(_target: DraftTarget, url: str, http) -> dict:
            r = http.get(f"{url}/internal/draft/info")
            r.raise_for_status()
            return r.json()

        try:
            info = self._call(get)
        except DraftUnavailable:
            return None
        if info.get("token_s") is not None:
            return float(info["token_s"])
        size = int(info.get("model_bytes") or 0)
        return target_decode_s * size / target_bytes if size and target_bytes else None

    def release(self, key: Hashable) -> None:
        entry = self._sent.pop(key, None)
        if entry is None:
            return
        target = self._resolve()
        if target is None or target.url.rstrip("/") != entry[0]:
            return  # that shard evicts idle states itself
        with contextlib.suppress(Exception):
            self._client(target).delete(f"{entry[0]}/internal/draft/{self._rid(key)}", timeout=0.05)

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for c in clients:
            c.close()
