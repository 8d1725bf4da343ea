"""ContinuousBatchScheduler as a specification (no llama.cpp: sequences are plain state)."""

import pytest
from themis_shard.llm.kv_pages import PageLedger
from themis_shard.llm.sampling import SamplingParams
from themis_shard.llm.scheduler import IterationKind, Limits, Scheduler, iteration_kind
from themis_shard.llm.sequence import Sequence

_rid = iter(range(10**6))


def seq(prompt_len: int, *, priority: int = 0, adapter: str | None = None, max_tokens: int = 100) -> Sequence:
    return Sequence(
        rid=next(_rid),
        prompt=list(range(1, prompt_len + 1)),
        params=SamplingParams(max_tokens=max_tokens),
        sink=lambda ev: None,
        priority=priority,
        adapter=adapter,
    )


def run(plan) -> None:
    """What the engine does after a successful decode: tokens are cached, finished prefill samples."""
    for s, n in plan.work:
        s.n_cached += n
        if s.n_pending == 0:
            s.tokens.append(7)


def scheduler(cells=1024, page=16, **limits) -> Scheduler:
    return Scheduler(PageLedger(cells, page), Limits(**limits))


def test_new_requests_join_between_iterations_and_prefill_is_chunked():
    sch = scheduler(chunk=8, max_tokens_per_batch=64)
    a = seq(20)
    sch.enqueue(a)
    p1 = sch.step()
    assert p1.admitted == [a] and p1.work == [(a, 8)]
    run(p1)
    b = seq(3)
    sch.enqueue(b)
    p2 = sch.step()
    assert p2.admitted == [b] and p2.work == [(a, 8), (b, 3)]
    run(p2)
    p3 = sch.step()
    # b decodes (one token) ahead of a's last prefill chunk
    assert p3.work == [(b, 1), (a, 4)]


def test_a_large_prefill_and_decoding_sequences_take_turns_instead_of_sharing_an_iteration():
    """On the CPU backend one decode of 8 decode tokens and a 120-token prefill costs more than
    the two apart, so neither rides with the other; each waits at most one iteration."""
    sch = scheduler(chunk=512, mix_prefill_tokens=32)
    a, b = seq(5), seq(5)
    sch.enqueue(a)
    sch.enqueue(b)
    run(sch.step())  # both prefill together
    run(sch.step())  # and decode
    new = seq(200)
    sch.enqueue(new)
    first = sch.step()
    assert first.admitted == [new] and first.work == [(new, 200)]  # prefill alone
    run(first)
    second = sch.step()
    assert second.work == [(a, 1), (b, 1), (new, 1)]  # all three decode now
    late = seq(100)
    sch.enqueue(late)
    third = sch.step()
    assert third.work == [(late, 100)]  # the last iteration carried none: prefill first
    fourth = sch.step()  # nothing was run: the decoders' turn
    assert fourth.work == [(a, 1), (b, 1), (new, 1)]


@pytest.mark.parametrize(
    ("mix_prefill_tokens", "prompt"),
    [(32, 32), (None, 300)],
    ids=["a small prefill rides with the decoders", "mixing can be kept always"],
)
def test_a_prefill_shares_the_iteration_when_small_or_when_told(mix_prefill_tokens, prompt):
    sch = scheduler(chunk=512, mix_prefill_tokens=mix_prefill_tokens)
    a = seq(5)
    sch.enqueue(a)
    run(sch.step())
    new = seq(prompt)
    sch.enqueue(new)
    assert sch.step().work == [(a, 1), (new, prompt)]


def test_iteration_kind_table():
    lim = Limits(mix_prefill_tokens=32)
    assert iteration_kind(0, 500, lim, last_prefilled=False) is IterationKind.MIXED  # nothing to split
    assert iteration_kind(8, 0, lim, last_prefilled=True) is IterationKind.MIXED
    assert iteration_kind(8, 32, lim, last_prefilled=False) is IterationKind.MIXED
    assert iteration_kind(8, 33, lim, last_prefilled=False) is IterationKind.PREFILL
    assert iteration_kind(8, 33, lim, last_prefilled=True) is IterationKind.DECODE
    always_mixed = Limits(mix_prefill_tokens=None)
    assert iteration_kind(8, 10_000, always_mixed, last_prefilled=False) is IterationKind.MIXED


def test_token_and_sequence_budgets_bound_a_batch():
    sch = scheduler(chunk=512, max_tokens_per_batch=100, max_batch_size=3)
    seqs = [seq(60) for _ in range(5)]
    for s in seqs:
        sch.enqueue(s)
    plan = sch.step()
    assert plan.n_tokens <= 100 and len(plan.work) <= 3
    assert plan.work == [(seqs[0], 60), (seqs[1], 40)]


def test_admission_waits_for_free_pages_and_running_limit():
    sch = scheduler(cells=64, page=16, max_running=8)
    big, small = seq(40), seq(30)
    sch.enqueue(big)
    sch.enqueue(small)
    plan = sch.step()
    assert plan.admitted == [big]  # 3 pages for big + 1 slack; small needs 2 more: waits (FIFO)
    assert sch.n_waiting == 1
    sch2 = scheduler(max_running=2)
    for _ in range(3):
        sch2.enqueue(seq(4))
    assert len(sch2.step().admitted) == 2 and sch2.n_waiting == 1


def test_priority_then_fifo():
    sch = scheduler(max_running=1)
    low, high1, high2 = seq(4, priority=0), seq(4, priority=5), seq(4, priority=5)
    for s in (low, high1, high2):
        sch.enqueue(s)
    assert sch.step().admitted == [high1]
    assert [s.rid for s in sch.waiting()] == [high2.rid, low.rid]


def test_out_of_pages_preempts_the_lowest_priority_latest_sequence():
    sch = scheduler(cells=64, page=16, chunk=512)
    a, b = seq(15, priority=1), seq(15)
    sch.enqueue(a)
    sch.enqueue(b)
    plan = sch.step()
    assert {s for s, _ in plan.work} == {a, b}
    run(plan)
    # both now hold 1 page and decode; growing past 16 cells needs a second page each
    for _ in range(2):
        run(sch.step())
    assert sch.ledger.used_pages == 4
    for _ in range(16):
        plan = sch.step()
        run(plan)
        if plan.preempted:
            break
    assert [s for s, _ in plan.preempted] == [b]
    assert b.n_cached == 0 and b.slot is None and b.preemptions == 1
    assert sch.waiting() == [b] and a in sch.running
    assert len(b.tokens) > 15  # keeps what it generated: it will recompute, not restart


def test_a_sequence_that_cannot_grow_alone_is_exhausted():
    sch = scheduler(cells=32, page=16)
    a = seq(30)
    sch.enqueue(a)
    for _ in range(5):
        plan = sch.step()
        if plan.exhausted:
            break
        run(plan)
    assert [s for s, _ in plan.exhausted] == [a] and sch.idle
    assert a.n_cached == 32  # it filled the whole cache first


def test_adapter_groups_alternate_between_iterations():
    sch = scheduler()
    base, legal = seq(4), seq(4, adapter="legal")
    sch.enqueue(base)
    sch.enqueue(legal)
    groups = []
    for _ in range(4):
        plan = sch.step()
        groups.append(plan.adapter)
        assert all(s.adapter == plan.adapter for s, _ in plan.work)
        run(plan)
    assert groups == [None, "legal", None, "legal"]


def test_remove_frees_slot_and_pages():
    sch = scheduler(max_running=1)
    a, b = seq(4), seq(4)
    sch.enqueue(a)
    sch.enqueue(b)
    run(sch.step())
    slot = sch.remove(a)
    assert slot == 0 and sch.ledger.used_pages == 0
    assert sch.step().admitted == [b] and b.slot == 0
    assert sch.remove(seq(3)) is None
