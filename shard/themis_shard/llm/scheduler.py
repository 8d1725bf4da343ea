"""ContinuousBatchScheduler: what goes into the next llama_batch (pure, no llama.cpp).

Orca-style iteration-level scheduling with Sarathi-style chunked prefill:

* every iteration, each running sequence that is decoding contributes one token, then
  sequences still prefilling contribute a chunk (≤ ``chunk`` tokens each) while the token budget
  (``max_tokens_per_batch``) and the sequence budget (``max_batch_size``) last;
* new requests are admitted between iterations, highest priority first and FIFO within a
  priority, up to ``max_running`` sequences (llama.cpp sequence slots), and only while the
  PagedKVCache ledger has free pages for their whole prompt (no admission on credit);
* when a running sequence needs a page that is not free, the lowest-priority, latest sequence is
  preempted: its pages and slot are freed and it is requeued to recompute later (vLLM's
  recompute preemption). A sequence that cannot grow even alone ends with ``length``;
* a large prefill does not ride with decode tokens: on llama.cpp's CPU backend, with its unified
  KV cache, one ``llama_decode`` of 8 decode tokens and a 120-token prefill took 286 ms where
  the two apart took 51 + 175 (Gemma 3 270M, 2 threads). So when prefill chunks of more than
  ``mix_prefill_tokens`` wait beside decoding sequences, iterations alternate between the two
  kinds (:func:`iteration_kind`), so neither waits more than one iteration for the other;
* sequences with different LoRA adapters cannot share a batch (llama.cpp applies adapters per
  context), so each iteration serves one adapter group, round-robin across groups.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from .kv_pages import PageLedger, pages_for
from .sequence import Sequence


@dataclass(frozen=True, slots=True)
class Limits:
    max_running: int = 128
    max_batch_size: int = 256
    max_tokens_per_batch: int = 8192
    chunk: int = 512
    #: Prefill tokens an iteration may carry beside decode tokens. Past this, the iteration
    #: carries one kind only (see :func:`iteration_kind`); None: always mixed (Sarathi).
    mix_prefill_tokens: int | None = 32


class IterationKind(Enum):
    MIXED = "mixed"
    DECODE = "decode"
    PREFILL = "prefill"


def iteration_kind(decoding: int, prefill_tokens: int, limits: Limits, last_prefilled: bool) -> IterationKind:
    """What the next iteration carries, given ``decoding`` sequences each wanting one token and
    ``prefill_tokens`` waiting in prefill chunks (pure). Mixed while the prefill is small; else
    one kind, the other than last time's when both wait."""
    small = limits.mix_prefill_tokens is None or prefill_tokens <= limits.mix_prefill_tokens
    if not decoding or not prefill_tokens or small:
        return IterationKind.MIXED
    return IterationKind.DECODE if last_prefilled else IterationKind.PREFILL


@dataclass(slots=True)
class Plan:
    """One iteration: feed ``n`` pending tokens of each ``(seq, n)`` in ``work``."""

    adapter: str | None = None
    work: list[tuple[Sequence, int]] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    #: (sequence, slot it held): the engine must drop that slot's KV cells before decoding.
    preempted: list[tuple[Sequence, int]] = field(default_factory=list)
    #: Sequences that cannot grow even alone in the cache: finish with "length".
    exhausted: list[tuple[Sequence, int]] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        return sum(n for _, n in self.work)


class Scheduler:
    def __init__(
        self, ledger: PageLedger, limits: Limits, *, on_admit: Callable[[Sequence], None] | None = None
    ) -> None:
        """``on_admit``: called with each sequence just given a slot (a KV-prefix restore may set
        its ``n_cached`` before the plan is built)."""
        self.ledger = ledger
        self.limits = limits
        self.running: list[Sequence] = []
        self._waiting: list[tuple[tuple[int, int], Sequence]] = []
        self._free_slots = list(range(limits.max_running - 1, -1, -1))
        self._last_adapter: str | None = None
        self._rotated = False
        self._last_prefilled = False
        self.preemptions = 0
        self.on_admit = on_admit

    # -- queue -----------------------------------------------------------------------------

    @property
    def n_waiting(self) -> int:
        return len(self._waiting)

    @property
    def idle(self) -> bool:
        return not self.running and not self._waiting

    def enqueue(self, seq: Sequence) -> None:
        heapq.heappush(self._waiting, (seq.order_key(), seq))

    def remove(self, seq: Sequence) -> int | None:
        """Take ``seq`` out (cancelled or finished); returns the slot whose KV must be dropped."""
        if seq in self.running:
            self.running.remove(seq)
            return self._release(seq)
        for i, (_, s) in enumerate(self._waiting):
            if s is seq:
                self._waiting.pop(i)
                heapq.heapify(self._waiting)
                break
        return None

    def waiting(self) -> list[Sequence]:
        return [s for _, s in sorted(self._waiting, key=lambda e: e[0])]

    def adopt(self, seq: Sequence) -> bool:
        """Run ``seq`` at once with its whole token list already in the KV cache (a copy of
        another sequence's cells): a slot and pages now, or False (it must queue and prefill)."""
        if not self._free_slots or len(self.running) >= self.limits.max_running:
            return False
        if not self.ledger.grow(seq, len(seq.tokens) + 1):
            return False
        seq.slot = self._free_slots.pop()
        seq.n_cached = len(seq.tokens)
        self.running.append(seq)
        return True

    # -- one iteration ---------------------------------------------------------------------

    def free_slot(self) -> int | None:
        """The slot admission would hand out next, or None when all are taken."""
        return self._free_slots[-1] if self._free_slots else None

    def step(self) -> Plan:
        plan = Plan()
        self._admit(plan)
        if not self.running:
            return plan
        plan.adapter = self._pick_adapter()
        lim = self.limits
        tokens_left, seqs_left = lim.max_tokens_per_batch, lim.max_batch_size
        group = sorted((s for s in self.running if s.adapter == plan.adapter), key=Sequence.order_key)
        decoding, prefilling = [s for s in group if s.decoding], [s for s in group if not s.decoding]
        kind = iteration_kind(
            len(decoding), sum(min(s.n_pending, lim.chunk) for s in prefilling), lim, self._last_prefilled
        )
        if kind is IterationKind.DECODE:
            prefilling = []
        elif kind is IterationKind.PREFILL:
            decoding = []
        # Decodes first (one token each, latency-critical), then prefill chunks fill the budget.
        for seq in decoding + prefilling:
            if seqs_left == 0 or tokens_left == 0:
                break
            if seq not in self.running:  # preempted earlier in this loop
                continue
            n = 1 if seq.decoding else min(seq.n_pending, lim.chunk, tokens_left)
            if seq.n_cached < seq.prefill_stop:  # KV-prefix cache saves the state at that boundary
                n = min(n, seq.prefill_stop - seq.n_cached)
            if not self._grow(seq, seq.n_cached + n, plan):
                continue
            plan.work.append((seq, n))
            tokens_left -= n
            seqs_left -= 1
        self._last_prefilled = any(not seq.decoding for seq, _ in plan.work)
        return plan

    def preempt_latest(self) -> tuple[Sequence, int] | None:
        """Forced preemption (llama.cpp found no KV slot despite the ledger): worst running seq."""
        if len(self.running) <= 1:
            return None
        victim = max(self.running, key=Sequence.order_key)
        return victim, self._preempt(victim)

    # -- internals -------------------------------------------------------------------------

    def _admit(self, plan: Plan) -> None:
        promised = 0
        while self._waiting and self._free_slots and len(self.running) < self.limits.max_running:
            seq = self._waiting[0][1]
            need = pages_for(len(seq.tokens) + 1, self.ledger.page_size)
            if need > self.ledger.free_pages - promised:
                if not self.running and need > self.ledger.total_pages:
                    # Can never fit: admit anyway, it will end with "length" once the cache is full.
                    need = self.ledger.free_pages - promised
                else:
                    break
            heapq.heappop(self._waiting)
            promised += need
            seq.slot = self._free_slots.pop()
            seq.n_cached = 0
            if self.on_admit is not None:
                self.on_admit(seq)
            self.running.append(seq)
            plan.admitted.append(seq)

    def _pick_adapter(self) -> str | None:
        groups = sorted({s.adapter for s in self.running}, key=lambda a: (a is not None, a or ""))
        if len(groups) == 1 or not self._rotated:
            self._rotated = True
            self._last_adapter = groups[0]
            return groups[0]
        keys = [(a is not None, a or "") for a in groups]
        last = (self._last_adapter is not None, self._last_adapter or "")
        nxt = next((g for g, k in zip(groups, keys, strict=True) if k > last), groups[0])
        self._last_adapter = nxt
        return nxt

    def _grow(self, seq: Sequence, cells: int, plan: Plan) -> bool:
        """Hold pages for ``cells``, preempting worse sequences; False if ``seq`` itself gave way."""
        while not self.ledger.grow(seq, cells):
            victim = max(self.running, key=Sequence.order_key)
            if victim is seq:
                if len(self.running) == 1 or cells > self.ledger.capacity_cells:
                    self.running.remove(seq)
                    plan.exhausted.append((seq, self._release(seq)))
                else:
                    plan.preempted.append((seq, self._preempt(seq)))
                return False
            plan.work = [(s, n) for s, n in plan.work if s is not victim]
            plan.preempted.append((victim, self._preempt(victim)))
        return True

    def _preempt(self, seq: Sequence) -> int:
        if seq in self.running:
            self.running.remove(seq)
        slot = self._release(seq)
        seq.n_cached = 0
        seq.preemptions += 1
        self.preemptions += 1
        self.enqueue(seq)
        return slot

    def _release(self, seq: Sequence) -> int:
        self.ledger.release(seq)
        slot = seq.slot
        seq.slot = None
        if slot is not None:
            self._free_slots.append(slot)
        return slot if slot is not None else -1
