"""The engine's speculative-decoding hook: draft → (engine verifies in its batch) → accept.

The engine stays in charge of batching: for a decoding sequence with ``speculative`` set it asks
``draft(seq, limit)`` for up to ``limit`` tokens, appends them after the sequence's pending token
in the same ``llama_batch`` with logits for every one of those positions, decodes, and hands the
k + 1 logits rows to ``verify``, which applies the exact rejection rule (``rejection.py``) with
the sequence's own RNG and the target's sampling distribution. The engine then keeps the KV cells
of the accepted prefix, drops the rest and emits accepted + next token.

Reproducible answers: the logits of a verify batch of k + 1 rows differ in their last bits from
k + 1 single-token decodes (llama.cpp's kernels depend on the batch shape), so a greedy answer
depends on the draft lengths chosen. For a deterministic source (prompt lookup) the lengths are
chosen from the sequence's own acceptance and the cost model's fixed prior: not from other
sequences, not from timings. The same request then gives the same answer on every run with the
same batch company (measured: 16 of 16 RAG answers alike across runs, where learnt costs and a
shared starting point gave 12 of 16), at the speed of the learnt costs within noise.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from .adaptive import AdaptiveConfig, CostModel, DraftLengthController
from .calibration import Measure, VerifyCostTable
from .drafts import Draft, DraftSource
from .rejection import TargetRows, verify_chain

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SpecState:
    controller: DraftLengthController
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0


class Speculator:
    def __init__(
        self,
        source: DraftSource,
        config: AdaptiveConfig | None = None,
        *,
        metrics=None,
        model: str = "default",
        cost: CostModel | None = None,
        target_bytes: int = 0,
        calibration: VerifyCostTable | None = None,
    ) -> None:
        """``calibration``: where this machine's verify costs are measured and kept
        (:meth:`calibrate`); without it the controllers price verify rounds with a prior line."""
        self.source = source
        self._calibration = calibration
        self.target_bytes = target_bytes  # the verify model's file size (draft cost prior)
        self._prior_asked = False
        self.config = config or AdaptiveConfig()
        self.cost = cost or CostModel()
        #: What the source showed across sequences (acceptance per position, draft cost): the
        #: starting point of each new sequence's controller.
        self.shared = DraftLengthController(self.config, self.cost)
        #: A deterministic source's sequences choose draft lengths with this never-taught copy.
        self._fixed_cost = CostModel()
        self._deterministic = bool(getattr(source, "deterministic", False))
        self._m = None
        if metrics is not None:
            labels = {"model": model, "source": source.name}
            self._m = {
                "draft": metrics.spec_draft_tokens.labels(**labels),
                "accepted": metrics.spec_accepted_tokens.labels(**labels),
                "roundtrip": metrics.draft_roundtrip.labels(**labels),
                "n_draft": metrics.spec_n_draft.labels(**labels),
            }
            self._fallback = lambda reason: metrics.spec_fallback.labels(reason=reason, **labels).inc()
            # Publish every fallback reason at 0 from the start, so rate() has a series (a
            # dashboard panel of "no fallbacks yet" shows 0, not "No data").
            for reason in ("low_acceptance", "slow_draft", "draft_error"):
                metrics.spec_fallback.labels(reason=reason, **labels)
        else:
            self._fallback = lambda reason: None

    @property
    def concurrent(self) -> bool:
        """A remote source's round trips may overlap (the engine drafts several sequences at once)."""
        return bool(getattr(self.source, "concurrent", False))

    def drafts_at(self, decoding: int) -> bool:
        """Is drafting worth its verify rows with ``decoding`` sequences in the batch?"""
        return not self.config.max_batch or decoding <= self.config.max_batch

    def calibrate(self, measure: Measure) -> None:
        """Before the engine's first request: price verify rounds with this machine's table
        (``calibration.py``), remembered or measured now with ``measure``. Both the learnt model
        and the fixed one a deterministic source's sequences use start from it; the fixed one
        never changes after, so draft lengths stay a function of the sequence alone."""
        if self._calibration is None or not self.config.adaptive:
            return
        try:
            table = self._calibration.get(measure, self.config.n_max)
        except Exception:  # a failed measurement costs speed, never the engine
            log.exception("measuring verify costs failed; the prior line prices them")
            return
        self._fixed_cost = CostModel.from_table(table)
        self.cost.learn_table(table)

    def close(self) -> None:
        """Release the source's resources (a draft model's context, a client's connections)."""
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def state(self, seq) -> SpecState:
        st = seq.spec
        if st is None and self._deterministic:
            st = seq.spec = SpecState(DraftLengthController(self.config, self._fixed_cost))
        elif st is None:
            if not self._prior_asked:
                self._set_prior()
            ctl = DraftLengthController(self.config, self.cost)
            ctl.inherit(self.shared)
            if self.config.adaptive and self.shared.draft_is_costly() and self.shared.predicts_no_gain():
                # A costly source (a draft model, whose first probe also prefills the whole
                # prompt; a round trip) that has not paid on earlier sequences: start backed off
                # fully. A free one (prompt lookup) starts fresh: that earlier requests had
                # nothing to quote says little about this one.
                ctl.cooldown = ctl.backoff = self.config.max_backoff
            st = seq.spec = SpecState(ctl)
        return st

    def _set_prior(self) -> None:
        """Once: what a draft token should cost, so a source that cannot pay is not probed
        (each sequence's first probe of a draft model prefills its whole prompt there)."""
        self._prior_asked = True
        expect = getattr(self.source, "expected_token_s", None)
        try:
            token_s = expect(self.cost.verify(0), self.target_bytes) if expect else None
        except Exception as exc:
            log.info("draft source %s: no cost estimate (%s)", self.source.name, exc)
            token_s = None
        if token_s is not None:
            self.shared.prior_per_token_s = token_s
            if token_s == 0.0:  # free drafts: nothing to learn about their cost
                self.shared.draft_obs = max(self.shared.draft_obs, 1)
        else:
            self._prior_asked = self.shared.draft_obs > 0  # ask again until timed

    def draft(self, seq, limit: int) -> Draft | None:
        """Draft tokens for ``seq``'s next round (None = decode plainly this round)."""
        st = self.state(seq)
        k = st.controller.choose(limit)
        if k <= 0:
            if self._m:
                self._m["n_draft"].observe(0)
            return None
        t0 = time.perf_counter()
        try:
            d = self.source.propose(seq, seq.tokens, k, seq.params)
        except Exception as exc:  # source down, timed out, or broken: plain decoding, later a probe
            log.info("draft source %s failed: %s", self.source.name, exc)
            st.controller.pause()
            self._fallback("draft_error")
            return None
        dt = time.perf_counter() - t0
        n = min(len(d.tokens), k)
        if self._m:
            self._m["roundtrip"].observe(dt)
            self._m["n_draft"].observe(n)
        if not self._deterministic:  # (microseconds of numpy: timing it would only add noise)
            self.shared.observe_draft_cost(n, dt, per_token=self.source.per_token_cost)
            if st.controller.observe_draft_cost(n, dt, per_token=self.source.per_token_cost):
                self._fallback("slow_draft")
        if n == 0:
            return None
        return Draft(d.tokens[:n], d.q[:n])

    def verify(self, seq, draft: Draft, rows: list[np.ndarray]) -> tuple[int, int]:
        """Apply the rejection rule; returns (accepted draft tokens, next token)."""
        n_acc, nxt = verify_chain(draft.tokens, draft.q, TargetRows(rows, seq.params), seq.sampler._rng)
        st = self.state(seq)
        st.drafted += len(draft.tokens)
        st.accepted += n_acc
        st.rounds += 1
        if self._m:
            self._m["draft"].inc(len(draft.tokens))
            self._m["accepted"].inc(n_acc)
        self.shared.observe(len(draft.tokens), n_acc)
        if st.controller.observe(len(draft.tokens), n_acc):
            self._fallback("low_acceptance")
        try:
            self.source.commit(seq, seq.tokens + draft.tokens[:n_acc] + [nxt])
        except Exception as exc:
            log.info("draft source %s commit failed: %s", self.source.name, exc)
        return n_acc, nxt

    def observe_iteration(self, seconds: float, extra_rows: int) -> None:
        """Timing of one decode without prefill: teaches the verify cost model."""
        self.cost.observe(extra_rows, seconds)

    def release(self, seq) -> None:
        if seq.spec is not None:
            try:
                self.source.release(seq)
            except Exception as exc:
                log.info("draft source %s release failed: %s", self.source.name, exc)
