"""Adaptive draft length (pure): pick n_draft to maximise expected tokens per second.

With a per-token acceptance rate α (the geometric model of Leviathan et al.), a round that drafts
k tokens emits E(k) = (1 − α^{k+1}) / (1 − α) tokens; the controller actually keeps one rate per
draft position (α_i = P(token i accepted | tokens before it were)), E(k) = 1 + Σ_j Π_{i≤j} α_i,
because prompt-lookup drafts are bursty (a right match stays right), which the geometric
model undervalues (k accepted at most, plus the target's own
token) and costs T(k) = verify(k) + draft(k): verify(k) = base + row·k is one decode whose batch
carries k more tokens with logits (the 262k-vocabulary head makes ``row`` large on CPU — a
9-token verify ≈ 4.4× a 1-token decode here), draft(k) = draft_fixed + draft_per_token·k
(prompt lookup: ≈ 0; a local draft model: k of its own decodes; a remote shard: a round trip).
The controller chooses argmax_k E(k)/T(k) over 0..n_max, and k = 0 (plain decoding) unless the
best k beats it by ``min_gain``. ``CostModel`` learns verify(k) from the engine's own decode
timings (iterations without prefill): measured per k where seen, a fitted line elsewhere; the
acceptance rate is an exponentially weighted estimate per sequence.

Fallback (``themis_speculation_fallback_total``): when the acceptance rate drops below
``min_acceptance`` or the draft source fails / is slower than ``max_draft_s``, the sequence
decodes plainly for ``cooldown`` rounds, then probes again with a one-token draft. The same
happens when the model predicts no gain (after ``recheck`` rounds); each failed probe doubles the
wait (up to ``max_backoff``), so on text where drafts never hit the waste tends to one logits row
per 256 tokens (≈ row / (256 · base) ≈ 0.2 %), and early on it is at most 1/8 of a row per token.
A probe that is accepted in full is followed by one twice as long (slow start, up to n_max), so
bursty sources show their per-position acceptance before the model judges them — a one-token
probe alone would only ever teach position 1, and the model, assuming later positions no better,
would keep a quoting answer from ever speculating. Where verify costs come in blocks of rows
(``calibration.py``), "twice as long" is cut back to the longest length that fills a block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AdaptiveConfig:
    n_max: int = 8  # the paper's n_draft
    adaptive: bool = True  # False: always n_max (a fixed draft length), fallback still applies
    min_acceptance: float = 0.3
    min_trials: int = 8  # draft tokens judged before the acceptance rate can trigger a fallback
    cooldown: int = 32  # plain rounds after a fallback before probing again
    recheck: int = 8  # plain rounds after the model predicted "no gain" before probing again
    max_backoff: int = 256  # the recheck interval doubles after each failed probe, up to this
    probe: int = 1  # draft length of a probe after a cooldown
    min_gain: float = 1.03  # speculate only when the model predicts at least this speedup
    alpha_prior: float = 0.6
    alpha_decay: float = 0.9  # EWMA weight kept per judged draft token
    max_draft_s: float = 0.25  # a draft slower than this (seconds) counts as a slow source
    #: Draft only while at most this many sequences decode together (0: any number). A batch
    #: that already keeps the cores busy gains nothing from extra rows to verify: on 2 CPU
    #: cores prompt lookup on RAG answers gave 1.38x at 1 sequence, 1.07x at 2, 0.86x at 4 and
    #: 0.83x at 8 (vLLM's ``disable_by_batch_size`` is the same rule).
    max_batch: int = 0


class CostModel:
    """verify(k): seconds of one decode carrying k extra logits rows.

    Measured per k where there is evidence (a decayed mean of that k's own decodes), else from a
    line base + row·k fitted to every decode (decayed least squares, seeded with a prior). The
    curve is not a line: on this CPU (2 threads) a decode costs 16.8 ms plain, 30 ms with one
    extra row, 50 with 2, 66 with 4 and 94 with 8 — the first row is dear, later ones cheaper
    (the head's matmul batches) — so a line fitted through it overprices long drafts by ~40 %
    and an adaptive controller trusting it never drafts 8 even where 8 wins by 1.3×.
    """

    def __init__(
        self,
        base_s: float = 0.027,
        row_s: float = 0.0115,
        decay: float = 0.98,
        prior_weight: float = 4.0,
        *,
        per_k_decay: float = 0.9,
        per_k_min_weight: float = 2.0,
    ) -> None:
        self._decay = decay
        # decayed sums for least squares y = base + row·x, seeded with prior pseudo-observations
        self._n = 0.0
        self._sx = self._sy = self._sxx = self._sxy = 0.0
        self._base0, self._row0 = base_s, row_s
        for x in (0.0, 8.0):
            self._add(x, base_s + row_s * x, prior_weight / 2)
        self._k_decay = per_k_decay
        self._k_min = per_k_min_weight
        self._per_k: dict[int, tuple[float, float]] = {}  # k → (decayed weight, mean seconds)

    def _add(self, x: float, y: float, w: float = 1.0) -> None:
        self._n += w
        self._sx += w * x
        self._sy += w * y
        self._sxx += w * x * x
        self._sxy += w * x * y

    def observe(self, extra_rows: int, seconds: float) -> None:
        d = self._decay
        self._n, self._sx, self._sy, self._sxx, self._sxy = (
            d * self._n,
            d * self._sx,
            d * self._sy,
            d * self._sxx,
            d * self._sxy,
        )
        self._add(float(extra_rows), seconds)
        w, mean = self._per_k.get(extra_rows, (0.0, 0.0))
        w = self._k_decay * w + 1.0
        self._per_k[extra_rows] = (w, mean + (seconds - mean) / w)

    @property
    def row(self) -> float:
        var = self._sxx - self._sx * self._sx / self._n
        if var <= 1e-9:
            return self._row0
        row = (self._sxy - self._sx * self._sy / self._n) / var
        return max(0.0, row)

    @property
    def base(self) -> float:
        return max(1e-4, (self._sy - self.row * self._sx) / self._n)

    def verify(self, k: int) -> float:
        w, mean = self._per_k.get(k, (0.0, 0.0))
        if w >= self._k_min:
            return mean
        return self.base + self.row * k

    def table(self, n_max: int) -> list[float]:
        """verify(0..n_max), for reports."""
        return [self.verify(k) for k in range(n_max + 1)]

    @classmethod
    def from_table(cls, seconds: Sequence[float], **kw) -> CostModel:
        """A model that knows verify(k) for every k in ``seconds`` (this machine's measured
        table, ``calibration.py``) as if it had seen each, and a line through its ends elsewhere."""
        model = cls(**kw)
        model.learn_table(seconds)
        return model

    def learn_table(self, seconds: Sequence[float]) -> None:
        """Start again from a measured table: verify(k) = ``seconds[k]`` with the weight of the
        evidence this model trusts, and the line through its ends. Later decodes teach on top."""
        n = len(seconds) - 1
        self._n = self._sx = self._sy = self._sxx = self._sxy = 0.0
        self._base0 = seconds[0]
        self._row0 = (seconds[-1] - seconds[0]) / n if n else 0.0
        for x in (0, n):
            self._add(float(x), seconds[x], 2.0)
        self._per_k = {k: (self._k_min, s) for k, s in enumerate(seconds)}

    def efficient_length(self, most: int) -> int:
        """The draft length up to ``most`` whose round emits the most tokens per second when
        every draft token is accepted (the shortest of equals): where a slow start ramps to.
        On a line that is ``most``; where the logits rows are computed in blocks, the last
        length that fills a block."""
        best_k, best = 1, 0.0
        for k in range(1, most + 1):
            rate = (k + 1) / self.verify(k)
            if rate > best * (1 + 1e-9):
                best_k, best = k, rate
        return best_k


def expected_tokens(alpha, k: int) -> float:
    """Tokens emitted by a round that drafts k tokens. ``alpha``: one acceptance probability per
    token (geometric), or per position — alpha[i] = P(draft token i+1 accepted | the ones before
    it were), which captures bursty drafts such as prompt lookup (a right match is right for
    many tokens)."""
    if k <= 0:
        return 1.0
    if not isinstance(alpha, (int, float)):
        run, total = 1.0, 1.0
        for i in range(k):
            run *= alpha[min(i, len(alpha) - 1)]
            total += run
        return total
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def best_draft_length(
    alpha,
    cost: CostModel,
    n_max: int,
    *,
    draft_fixed_s: float = 0.0,
    draft_per_token_s: float = 0.0,
    min_gain: float = 1.0,
) -> int:
    plain = 1.0 / cost.verify(0)
    best_k, best = 0, plain * min_gain
    for k in range(1, n_max + 1):
        rate = expected_tokens(alpha, k) / (cost.verify(k) + draft_fixed_s + draft_per_token_s * k)
        if rate > best:
            best_k, best = k, rate
    return best_k


class DraftLengthController:
    """Per-sequence state: acceptance estimate, fallback cooldown, the n_draft to use next."""

    def __init__(self, config: AdaptiveConfig, cost: CostModel, alpha: float | None = None) -> None:
        self.config = config
        self.cost = cost
        #: starts from the source's recent acceptance across sequences when the caller knows it
        self.alpha = config.alpha_prior if alpha is None else alpha
        #: per-position conditional acceptance (see ``expected_tokens``), starting flat
        self.alpha_pos = [self.alpha] * max(1, config.n_max)
        self._n_pos = [0.0] * len(self.alpha_pos)  # decayed evidence per position
        self.trials = 0
        self.cooldown = 0
        self.draft_fixed_s = 0.0
        self.draft_per_token_s = 0.0
        #: before the source was ever timed: its expected seconds per draft token (from the
        #: draft/target model size ratio), so a draft model that cannot pay is never probed —
        #: its first probe would also prefill the whole prompt on the draft model
        self.prior_per_token_s = 0.0
        self.draft_obs = 0
        self.last_k = 0
        self.backoff = config.recheck
        self.probing = False
        #: next probe length while a probe run keeps being accepted in full (slow start)
        self.ramp = 0

    def choose(self, limit: int) -> int:
        """n_draft for the next round (0 = plain decoding), at most ``limit``."""
        c = self.config
        if limit <= 0:
            self.last_k = 0
            return 0
        if self.cooldown > 0:
            self.cooldown -= 1
            k = min(c.probe, limit) if self.cooldown == 0 else 0
            if k and c.adaptive and not self._could_pay():
                # Not even a draft accepted in full would pay at this draft cost: a probe could
                # only confirm that, at the price of catching the draft up on the whole context.
                k, self.cooldown = 0, c.max_backoff
            self.probing = k > 0
        elif self.ramp:  # a probe was accepted in full: try up to twice as long before the model decides
            k, self.ramp = self.ramp, 0
            self.probing = True
        elif not c.adaptive:
            k = c.n_max
        else:
            k = self._best_length(self.position_rates())
            if k == 0:
                # Predicted not to pay: stay plain but re-probe after a back-off, so a change in
                # the text (a quote begins) is noticed; each "no" doubles the wait.
                self.cooldown = self.backoff
                self.backoff = min(2 * self.backoff, c.max_backoff)
            else:
                self.backoff = c.recheck
        self.last_k = min(k, limit)
        return self.last_k

    def observe(self, drafted: int, accepted: int) -> str | None:
        """Record a verified round; returns a fallback reason when speculation should pause."""
        if drafted <= 0:
            return None
        c = self.config
        if self.probing:  # a failed probe doubles the wait before the next one
            self.probing = False
            if not accepted:
                self.backoff = min(2 * self.backoff, c.max_backoff)
            elif accepted == drafted and drafted < c.n_max and self._could_pay():
                # Slow start: a one-token probe only teaches position 1; doubling the length
                # while it keeps hitting shows whether drafts are bursty (a quote: position i
                # accepted given i−1 almost surely) before the model judges them, for the cost
                # of one logits row per failed step.
                longer = self.cost.efficient_length(min(2 * drafted, c.n_max))
                self.ramp = longer if longer > drafted else 0
        # Geometric model: each judged draft token is a trial; the chain stops at the first reject.
        judged = accepted + (1 if accepted < drafted else 0)
        d = c.alpha_decay
        for i in range(judged):
            hit = 1.0 if i < accepted else 0.0
            self.alpha = d * self.alpha + (1 - d) * hit
            if i < len(self.alpha_pos):
                # per-position estimate: mean of its own (decayed) trials
                n = self._n_pos[i] = d * self._n_pos[i] + 1.0
                self.alpha_pos[i] += (hit - self.alpha_pos[i]) / n
        self.trials += judged
        if self.trials >= c.min_trials and self.alpha < c.min_acceptance:
            self.pause()
            return "low_acceptance"
        return None

    def inherit(self, other: DraftLengthController) -> None:
        """Start from what the source showed on earlier sequences (acceptance per position,
        draft cost), with little weight, so this sequence's own evidence soon dominates."""
        self.alpha = other.alpha
        self.alpha_pos = list(other.alpha_pos)
        self._n_pos = [min(n, 2.0) for n in other._n_pos]
        self.draft_fixed_s = other.draft_fixed_s
        self.draft_per_token_s = other.draft_per_token_s
        self.prior_per_token_s = other.prior_per_token_s
        self.draft_obs = other.draft_obs

    def predicts_no_gain(self) -> bool:
        """With what this controller has learnt, would n_draft = 0 be chosen?"""
        return self._best_length(self.position_rates()) == 0

    @property
    def per_token_s(self) -> float:
        """Draft seconds per token: measured once the source was timed, else the prior."""
        return (
            self.draft_per_token_s if self.draft_obs else max(self.draft_per_token_s, self.prior_per_token_s)
        )

    def _could_pay(self) -> bool:
        """Would drafting pay if every draft token were accepted? (Not for a draft model whose
        per-token cost nears a target decode: ramping its probes up only wastes more.)"""
        return self._best_length(1.0) > 0

    def _best_length(self, alpha) -> int:
        """``best_draft_length`` with this controller's cost knowledge and config."""
        c = self.config
        return best_draft_length(
            alpha,
            self.cost,
            c.n_max,
            draft_fixed_s=self.draft_fixed_s,
            draft_per_token_s=self.per_token_s,
            min_gain=c.min_gain,
        )

    def draft_is_costly(self, share: float = 0.25) -> bool:
        """Does drafting one round cost more than ``share`` of a plain decode (a draft model or
        a round trip, not prompt lookup)?"""
        per_round = self.draft_fixed_s + self.per_token_s * max(1, self.config.probe)
        return per_round > share * self.cost.verify(0)

    def position_rates(self) -> list[float]:
        """α_i with little evidence of its own lean on α_{i-1} (a position never drafted is
        assumed as good as the one before it: drafts are bursty, not worse further out)."""
        out: list[float] = []
        prev = self.alpha
        for a, n in zip(self.alpha_pos, self._n_pos, strict=True):
            w = n / (n + 2.0)
            prev = w * a + (1 - w) * prev
            out.append(prev)
        return out

    def observe_draft_cost(self, drafted: int, seconds: float, *, per_token: bool = False) -> str | None:
        """Record what drafting took (``per_token``: a draft model, cost ∝ k; otherwise a fixed
        cost per round such as a round trip); returns "slow_draft" when the source is too slow."""
        if drafted > 0:
            self.draft_obs += 1
            if per_token:
                self.draft_per_token_s = 0.8 * self.draft_per_token_s + 0.2 * seconds / drafted
            else:
                self.draft_fixed_s = 0.8 * self.draft_fixed_s + 0.2 * seconds
        if seconds > self.config.max_draft_s:
            self.pause()
            return "slow_draft"
        return None

    def pause(self) -> None:
        """Plain decoding for ``cooldown`` rounds, then a probe (acceptance re-estimated from
        halfway back to the prior, so one good probe can resume speculation)."""
        self.cooldown = max(self.config.cooldown, self.backoff)
        self.alpha = 0.5 * (self.alpha + self.config.alpha_prior)
        self.alpha_pos = [0.5 * (a + self.config.alpha_prior) for a in self.alpha_pos]
        self.trials = 0
