"""Local draft model: a smaller GGUF (e.g. the verify model's first k layers, made with
``tools/draft_model.py``) in its own llama context on the same shard, driven on the engine thread.

Per sequence it keeps a draft slot and the tokens whose KV it holds. ``propose`` first rolls the
draft's cache back to the longest common prefix with the verified context (that is the rollback
of rejected draft tokens — a rejected token simply is not in the next context), feeds the
missing tokens in one batch, then decodes k tokens one at a time. Greedy requests draft greedily
(q = point mass); sampled requests draw each draft token from the draft's own distribution under
the request's temperature / top-k / top-p and send that distribution as q, so the rejection rule
stays exact.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..model import resolve_model_path
from ..native import Batch, NativeContext, NativeModel
from ..tools.draft_model import draft_info_from_meta
from .drafts import Draft, DraftUnavailable
from .rejection import Dist, target_dist


@dataclass(slots=True)
class _Slot:
    slot: int
    cached: list[int] = field(default_factory=list)
    rng: np.random.Generator | None = None


class LocalDraftModel:
    name = "local"
    per_token_cost = True
    deterministic = False  # its own decode: timed, and its cost is learnt

    def __init__(
        self,
        model: NativeModel,
        *,
        n_ctx: int = 4096,
        n_seq_max: int = 16,
        n_threads: int = 2,
        n_batch: int = 512,
    ) -> None:
        self.model = model
        self.ctx = NativeContext(
            model, n_ctx=n_ctx, n_seq_max=n_seq_max, n_batch=n_batch, n_ubatch=n_batch, n_threads=n_threads
        )
        self.batch = Batch(n_batch)
        self._free = list(range(n_seq_max - 1, -1, -1))
        self._state: dict[Hashable, _Slot] = {}
        self.info: dict | None = None
        self.model_bytes = 0  # the GGUF's size: decode cost scales with the weights read

    @classmethod
    def open(cls, path: str | Path, *, verify_sha256: str | None = None, **kw) -> LocalDraftModel:
        file = resolve_model_path(str(path))
        model = NativeModel(file, n_gpu_layers=0)
        info = draft_info_from_meta(model.meta)
        if verify_sha256 and info and info["of_sha256"] != verify_sha256:
            model.close()
            raise ValueError(f"{file.name} is a draft of another model ({info['of_name']})")
        src = cls(model, **kw)
        src.info = info
        src.model_bytes = file.stat().st_size
        return src

    def close(self) -> None:
        self.ctx.close()
        self.model.close()

    def _slot(self, key: Hashable, params) -> _Slot:
        st = self._state.get(key)
        if st is None:
            if not self._free:
                raise DraftUnavailable("no free draft slot")
            seed = getattr(params, "seed", None)
            st = self._state[key] = _Slot(
                self._free.pop(), rng=np.random.default_rng(None if seed is None else seed + 1)
            )
        return st

    def _decode(self, st: _Slot, tokens: list[int]) -> np.ndarray:
        """Feed ``tokens`` after what the slot holds; logits of the last one."""
        cap = self.batch.capacity
        for a in range(0, len(tokens), cap):
            chunk = tokens[a : a + cap]
            self.batch.clear()
            self.batch.add(chunk, len(st.cached), st.slot)
            if self.ctx.decode(self.batch) != 0:
                self.ctx.drop_seq(st.slot)
                st.cached = []
                raise DraftUnavailable("draft decode failed")
            st.cached.extend(chunk)
        return self.ctx.logits(self.batch.n - 1)

    def propose(self, key: Hashable, tokens: list[int], k: int, params) -> Draft:
        st = self._slot(key, params)
        if len(tokens) + k >= self.ctx.n_ctx:
            return Draft()
        n = 0
        lim = min(len(st.cached), len(tokens) - 1)  # re-feed at least the last token (for logits)
        while n < lim and st.cached[n] == tokens[n]:
            n += 1
        if n < len(st.cached):
            self.ctx.drop_tail(st.slot, n)
            del st.cached[n:]
        logits = self._decode(st, tokens[n:])
        out, qs = [], []
        for i in range(k):
            q = target_dist(logits, params)
            tok = q.sample(st.rng)
            out.append(tok)
            qs.append(q if not params.greedy else Dist.point(tok))
            if self.model.is_eog(tok) or i == k - 1:
                break
            logits = self._decode(st, [tok])
        return Draft(out, qs)

    def commit(self, key: Hashable, tokens: list[int]) -> None:
        pass  # rollback is lazy: the next propose trims to the common prefix

    def expected_token_s(self, target_decode_s: float, target_bytes: int) -> float | None:
        """Decoding reads every weight once per token: cost ≈ the size ratio × a target decode
        (a 15/18-layer draft of the 270M model keeps the whole 262k-row head: 0.95)."""
        if not (self.model_bytes and target_bytes):
            return None
        return target_decode_s * self.model_bytes / target_bytes

    def release(self, key: Hashable) -> None:
        st = self._state.pop(key, None)
        if st is not None:
            self.ctx.drop_seq(st.slot)
            self._free.append(st.slot)
