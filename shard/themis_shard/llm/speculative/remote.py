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

``RemoteDraft`` raises ``DraftUnavailable`` on any failure or timeout; the speculator then counts
a ``draft_error`` fallback and decodes locally (probing again after a back-off).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field, replace

from ..sampling import SamplingParams
from .drafts import Draft, DraftUnavailable
from .rejection import Dist

Q_SUPPORT = 64


@dataclass(slots=True)
class _Remote:
    tokens: list[int] = field(default_factory=list)


class DraftService:
    """Server side: per-request context copies in front of a ``LocalDraftModel`` (thread-safe)."""

    def __init__(self, source, *, max_states: int = 64) -> None:
        self.source = source
        self.max_states = max_states
        self._lock = threading.Lock()
        self._states: OrderedDict[str, _Remote] = OrderedDict()

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
            d = self.source.propose(rid, st.tokens, k, params)
        q = None if params.greedy else [x.to_wire() for x in d.q]
        return {"tokens": d.tokens, "q": q}

    def release(self, rid: str) -> None:
        with self._lock:
            if self._states.pop(rid, None) is not None:
                self.source.release(rid)


class RemoteDraft:
    """Client side (verify shard): a draft source backed by a draft shard's ``/internal/draft``."""

    name = "remote"
    per_token_cost = False  # a round trip dominates

    def __init__(self, url: str, *, timeout_s: float = 0.25, headers: dict | None = None) -> None:
        import httpx

        self.url = url.rstrip("/")
        self._http = httpx.Client(timeout=timeout_s, headers=headers or {})
        self._client = uuid.uuid4().hex[:12]
        self._sent: dict[Hashable, list[int]] = {}

    def _rid(self, key: Hashable) -> str:
        return f"{self._client}-{getattr(key, 'rid', id(key))}"

    def propose(self, key: Hashable, tokens: list[int], k: int, params) -> Draft:
        sent = self._sent.get(key, [])
        n = 0
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
        try:
            r = self._http.post(f"{self.url}/internal/draft", json=body)
            if r.status_code == 409 and n:  # the draft shard lost our state: resend everything
                body.update(pos=0, tokens=list(tokens))
                r = self._http.post(f"{self.url}/internal/draft", json=body)
            r.raise_for_status()
            data = r.json()
        except Exception as exc:
            self._sent.pop(key, None)
            raise DraftUnavailable(f"draft shard {self.url}: {exc}") from exc
        self._sent[key] = list(tokens)
        toks = [int(t) for t in data["tokens"]][:k]
        if data.get("q") is None:
            q = [Dist.point(t) for t in toks]
        else:
            q = [Dist.from_wire(d) for d in data["q"][: len(toks)]]
        return Draft(toks, q)

    def commit(self, key: Hashable, tokens: list[int]) -> None:
        pass  # the next propose sends pos = the common prefix: that is the rollback

    def release(self, key: Hashable) -> None:
        if self._sent.pop(key, None) is None:
            return
        with contextlib.suppress(Exception):  # the draft shard evicts idle states itself
            self._http.delete(f"{self.url}/internal/draft/{self._rid(key)}", timeout=0.05)

    def close(self) -> None:
        self._http.close()
