"""The continuous-batching engine on the real bundled model (llama.cpp, 2 threads)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from themis_shard.llm.engine import Engine, EngineConfig
from themis_shard.llm.metrics import LLMMetrics
from themis_shard.llm.native import Batch, NativeContext
from themis_shard.llm.sampling import SamplingParams, top2_margin
from themis_shard.llm.scheduler import Limits
from themis_shard.llm.sequence import DoneEvent, TokenEvent

from .conftest import NOISE_LOGITS
from .reference import first_divergence, greedy_reference

pytestmark = pytest.mark.llm

PROMPTS = [
    "The quick brown fox",
    "In 1492, Columbus sailed",
    "def fibonacci(n):",
    "Photosynthesis is the process by which plants",
]
DISTRACTORS = [
    "Hello there, my friend, how",
    "A B C D E F G H I J K L M N",
    "Once upon a time in a land far away there lived a",
]


class Collector:
    def __init__(self) -> None:
        self.events: list = []
        self.finished = threading.Event()

    def __call__(self, ev) -> None:
        self.events.append(ev)
        if not isinstance(ev, TokenEvent):
            self.finished.set()

    @property
    def tokens(self) -> list[int]:
        return [e.token_id for e in self.events if isinstance(e, TokenEvent) and e.token_id >= 0]

    @property
    def done(self) -> DoneEvent:
        assert self.finished.wait(120), "generation did not finish"
        assert isinstance(self.events[-1], DoneEvent), self.events[-1]
        return self.events[-1]


def make_engine(model, **limits) -> Engine:
    n_ctx = limits.pop("n_ctx", 2048)
    cfg = EngineConfig(n_ctx=n_ctx, n_threads=2, page_size=16, max_queue=64, limits=Limits(**limits))
    eng = Engine(model, cfg, metrics=LLMMetrics(CollectorRegistry()))
    eng.start()
    return eng


@pytest.fixture(scope="module")
def engine(native_model):
    eng = make_engine(native_model, max_running=16, chunk=16)
    yield eng
    eng.stop()


@pytest.fixture(scope="module")
def references(native_model):
    return {p: greedy_reference(native_model, native_model.tokenize(p), 24) for p in PROMPTS}


def assert_greedy_equivalent(ref: tuple[list[int], list[float]], got: list[int]) -> None:
    tokens, margins = ref
    i = first_divergence(tokens, got)
    if i is None:
        return
    margin = margins[min(i, len(margins) - 1)]
    assert margin <= NOISE_LOGITS, (
        f"diverged from the single-sequence reference at a confident position {i} (top-2 margin {margin:.3f})"
    )


def test_batch_shape_noise_is_bounded(native_model, references):
    """Measure how much a top-2 margin moves when only the batch shape changes (other sequences
    decoding alongside, prefill split into chunks): the tolerance the greedy spec relies on."""
    others = [native_model.tokenize(p) for p in DISTRACTORS]
    worst = 0.0
    for prompt in PROMPTS[:2]:
        toks = native_model.tokenize(prompt)
        ref, margins = references[prompt]
        full = toks + ref
        for chunk in (1, 7):
            ctx = NativeContext(native_model, n_ctx=1024, n_seq_max=4, n_batch=512, n_ubatch=512, n_threads=2)
            b = Batch(512)
            for i, o in enumerate(others):
                b.add(o, 0, i + 1, logits="none")
            assert ctx.decode(b) == 0
            pos, opos = 0, [len(o) for o in others]
            while pos < len(full):
                n = min(chunk, len(full) - pos)
                b.clear()
                for i in range(len(others)):
                    b.add([5], opos[i], i + 1)
                    opos[i] += 1
                b.add(full[pos : pos + n], pos, 0, logits="all")
                assert ctx.decode(b) == 0
                for j in range(n):
                    k = pos + j - (len(toks) - 1)
                    if 0 <= k < len(margins):
                        worst = max(worst, abs(top2_margin(ctx.logits(len(others) + j)) - margins[k]))
                pos += n
            ctx.close()
    print(f"\nmax top-2 margin shift across batch shapes: {worst:.3f} logits")
    assert 0 < worst <= NOISE_LOGITS


def test_batched_greedy_matches_single_sequence_reference(engine, native_model, references):
    runs = {p: Collector() for p in PROMPTS}
    noise = [Collector() for _ in DISTRACTORS]
    for p, d in zip(DISTRACTORS, noise, strict=True):
        engine.submit(native_model.tokenize(p), SamplingParams(max_tokens=30), d)
    for p, c in runs.items():
        engine.submit(native_model.tokenize(p), SamplingParams(max_tokens=24), c)
    for p, c in runs.items():
        assert c.done.completion_tokens == len(c.tokens)
        assert_greedy_equivalent(references[p], c.tokens)
    assert all(d.done for d in noise)


def test_sixteen_parallel_requests_all_complete_with_their_lengths(engine, native_model):
    collectors = []
    for i in range(16):
        c = Collector()
        prompt = native_model.tokenize(f"Item {i}: a list of fruits, apples, pears,")
        engine.submit(prompt, SamplingParams(max_tokens=4 + i % 8), c)
        collectors.append((4 + i % 8, c))
    for max_tokens, c in collectors:
        done = c.done
        if done.finish_reason == "length":
            assert done.completion_tokens == max_tokens
        else:
            assert done.finish_reason == "stop" and done.completion_tokens < max_tokens
        assert done.ttft_s is not None and done.total_s >= done.ttft_s
    assert engine.stats()["running"] == 0 and engine.ledger.used_pages == 0


def test_seeded_sampling_reproduces(engine, native_model):
    prompt = native_model.tokenize("My favourite colour is")
    params = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.95, seed=1234)
    first, second = Collector(), Collector()
    engine.submit(prompt, params, first)
    assert first.done.completion_tokens > 0
    engine.submit(prompt, params, second)
    assert second.done.text == first.done.text and second.tokens == first.tokens


def test_stop_string_ends_generation_before_it(engine, native_model, references):
    prompt = PROMPTS[0]
    full = native_model.detokenize(references[prompt][0])
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    c = Collector()
    engine.submit(native_model.tokenize(prompt), SamplingParams(max_tokens=24, stop=(stop,)), c)
    assert c.done.finish_reason == "stop"
    assert c.done.text == full[: full.index(stop)]


def test_cancel_frees_the_sequence_and_its_kv(engine, native_model):
    c = Collector()
    seq = engine.submit(
        native_model.tokenize("Tell me a very long story:"), SamplingParams(max_tokens=500), c
    )
    assert pytest.importorskip("time") and _wait(lambda: len(c.tokens) >= 2)
    slot = seq.slot
    assert engine.call(lambda: engine.ctx.seq_pos_max(slot)).result(10) >= 0
    engine.cancel(seq)
    assert c.done.finish_reason == "cancelled" and c.done.completion_tokens < 500
    used, pos_max = engine.call(lambda: (engine.ledger.used_pages, engine.ctx.seq_pos_max(slot))).result(10)
    assert used == 0 and pos_max == -1


def test_preemption_under_a_small_kv_cache_completes_every_request(native_model, references):
    """16 pages of 16 cells for 4 sequences of ~35 cells and 3 of ~110: the scheduler must preempt
    and recompute, and the recomputed continuations still match the single-sequence reference."""
    eng = make_engine(native_model, n_ctx=256, max_running=8, chunk=16)
    try:
        runs = [(p, Collector()) for p in PROMPTS]
        for p, c in runs:
            eng.submit(native_model.tokenize(p), SamplingParams(max_tokens=24), c)
        extra = [Collector() for _ in DISTRACTORS]
        for p, c in zip(DISTRACTORS, extra, strict=True):
            eng.submit(native_model.tokenize(p), SamplingParams(max_tokens=100), c)
        for p, c in runs:
            assert c.done.finish_reason in ("length", "stop")
            assert_greedy_equivalent(references[p], c.tokens)
        for c in extra:
            assert c.done.finish_reason in ("length", "stop")
        assert eng.scheduler.preemptions > 0
        assert sum(c.done.preemptions for _, c in runs) + sum(c.done.preemptions for c in extra) > 0
        assert eng.ledger.used_pages == 0
    finally:
        eng.stop()


def _wait(pred, timeout: float = 60.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


def test_logits_rows_are_numpy_views(native_model):
    ctx = NativeContext(native_model, n_ctx=256, n_seq_max=1, n_batch=64, n_ubatch=64, n_threads=2)
    try:
        b = Batch(64)
        b.add(native_model.tokenize("Hi"), 0, 0)
        assert ctx.decode(b) == 0
        row = ctx.logits(b.n - 1)
        assert row.shape == (native_model.n_vocab,) and np.isfinite(row).all()
    finally:
        ctx.close()
