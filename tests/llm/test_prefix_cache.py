"""KV-prefix cache: identity, LRU budget and disk tier (pure), and restore-vs-prefill
equivalence on the real bundled model."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from themis_shard.llm.prefix_cache import PrefixCache, block_hashes, chain_seed

SEED = chain_seed("0" * 64, 16, {"type_k": 1})


def cache(**kw) -> PrefixCache:
    return PrefixCache(seed=SEED, block=16, **kw)


# -- pure ---------------------------------------------------------------------------------------


def test_hash_chain_identifies_every_block_aligned_prefix():
    a = list(range(100))
    b = list(range(40)) + [7] * 60
    ha, hb = block_hashes(a, 16, SEED), block_hashes(b, 16, SEED)
    assert len(ha) == 6  # 100 // 16
    assert ha[:2] == hb[:2] and ha[2] != hb[2]  # shared first 32 tokens, differ inside block 3
    assert block_hashes(a, 16, chain_seed("1" * 64, 16, {"type_k": 1}))[0] != ha[0]  # other model


def test_lookup_finds_the_longest_cached_prefix_and_trims_longer_entries():
    c = cache()
    prompt = list(range(200))
    c.put(prompt[:32], b"s32")
    c.put(prompt[:96], b"s96")
    hit = c.lookup([*prompt, 1], limit=199)
    assert hit.n_tokens == 96 and hit.entry.state == b"s96"
    hit = c.lookup(prompt[:80] + [5] * 50)  # shares 5 blocks: 80 tokens via the 96-token entry
    assert hit.n_tokens == 80 and hit.entry.n_tokens == 96
    assert c.lookup([9] * 50) is None
    assert c.lookup(prompt, limit=31).n_tokens == 16 and c.lookup(prompt, limit=15) is None
    no_trim = cache(trim=False)
    no_trim.put(prompt[:96], b"s96")
    assert no_trim.lookup(prompt[:80] + [5] * 50) is None


def test_lru_byte_budget_is_respected():
    c = cache(budget_bytes=1000)
    for i in range(10):
        c.put([i] * 16, bytes(300))
        assert c.bytes <= 1000
    assert len(c) == 3 and c.evictions == 7
    assert c.lookup([9] * 16) is not None and c.lookup([0] * 16) is None
    c.lookup([7] * 16)  # touch: 7 becomes most recent, 8 is evicted next
    c.put([10] * 16, bytes(300))
    assert c.lookup([7] * 16) is not None and c.lookup([8] * 16) is None
    assert c.put([11] * 16, bytes(2000)) is None  # larger than the whole budget: not kept


def test_disk_tier_brings_evicted_states_back(tmp_path):
    c = cache(budget_bytes=500, disk_dir=tmp_path)
    c.put([1] * 16, b"a" * 300)
    c.put([2] * 16, b"b" * 300)  # evicts [1]*16 from RAM, still on disk
    assert len(c) == 1
    hit = c.lookup([1] * 16 + [3])
    assert hit is not None and hit.entry.state == b"a" * 300
    again = cache(budget_bytes=500, disk_dir=tmp_path)  # a restarted shard
    assert again.get(block_hashes([2] * 16, 16, SEED)[0]).state == b"b" * 300


def test_unaligned_or_empty_prefixes_are_not_stored():
    c = cache()
    assert c.put(list(range(20)), b"x") is None and c.put([], b"x") is None


# -- real model ---------------------------------------------------------------------------------

SYSTEM = (
    "You are Themis, a careful assistant for a distributed database. Answer precisely, cite the "
    "relevant configuration keys, and never invent numbers. The cluster has shards, each with a "
    "document store, a vector index and an inference engine. Replication follows the hash ring. "
)


def long_prompt(native_model, n: int, tail: str = "") -> list[int]:
    text, i = SYSTEM, 0
    while len(native_model.tokenize(text)) < n:
        i += 1
        text += f"Rule {i}: shard {i % 7} keeps replica {i % 3} of range {i * 37 % 101}. "
    toks = native_model.tokenize(text)[:n]
    return toks + (native_model.tokenize(tail, add_special=False) if tail else [])


@pytest.fixture(scope="module")
def prefix_engine(native_model):
    from themis_shard.llm.engine import Engine, EngineConfig
    from themis_shard.llm.metrics import LLMMetrics
    from themis_shard.llm.prefix_hook import EnginePrefixHook
    from themis_shard.llm.scheduler import Limits

    metrics = LLMMetrics(CollectorRegistry())
    cfg = EngineConfig(n_ctx=2048, n_threads=2, page_size=16, max_queue=64, limits=Limits(max_running=4))
    c = PrefixCache(seed=SEED, block=64, budget_bytes=64 << 20)
    hook = EnginePrefixHook(c, min_tokens=64, metrics=metrics)
    eng = Engine(native_model, cfg, metrics=metrics, prefix=hook)
    eng.start()
    yield eng, hook, metrics
    eng.stop()


def run(eng, prompt, n=12, shared_prefix=0):
    from themis_shard.llm.sampling import SamplingParams

    from .test_engine_llm import Collector

    col = Collector()
    eng.submit(prompt, SamplingParams(max_tokens=n, temperature=0.0), col, shared_prefix=shared_prefix)
    done = col.done
    return col.tokens, done


@pytest.mark.llm
def test_restored_prefix_decodes_like_a_full_prefill(native_model, prefix_engine):
    from .reference import greedy_reference
    from .test_engine_llm import assert_greedy_equivalent

    eng, hook, metrics = prefix_engine
    prompt = long_prompt(native_model, 300, "Question: which shard keeps range 74? Answer:")
    ref = greedy_reference(native_model, prompt, 12)
    cold, d_cold = run(eng, prompt)
    assert hook.saves == 1 and len(hook.cache) == 1  # saved at the last block boundary
    assert hook.cache.keys()[0][1] == (len(prompt) - 1) // 64 * 64
    warm, d_warm = run(eng, prompt)
    assert hook.restores == 1
    assert_greedy_equivalent(ref, cold)
    assert_greedy_equivalent(ref, warm)
    # Another question after the same system prompt: the shared blocks are restored (trimmed).
    other = long_prompt(native_model, 300)[:200] + native_model.tokenize(
        " Unrelated: the capital of France is", add_special=False
    )
    got, _ = run(eng, other)
    assert hook.restores == 2
    assert_greedy_equivalent(greedy_reference(native_model, other, 12), got)
    reg = metrics.kv_prefix_hits.labels(model="default")._value.get()
    assert reg == 2 and metrics.kv_prefix_misses.labels(model="default")._value.get() == 1
    assert metrics.kv_prefix_saved_tokens.labels(model="default")._value.get() >= 256 + 192
    print(f"TTFT cold {d_cold.ttft_s:.3f}s warm {d_warm.ttft_s:.3f}s")
    assert d_warm.ttft_s < d_cold.ttft_s


@pytest.mark.llm
def test_short_prompts_bypass_the_cache(native_model, prefix_engine):
    eng, hook, _metrics = prefix_engine
    before = (hook.saves, hook.restores)
    run(eng, native_model.tokenize("The quick brown fox"), 4)
    assert (hook.saves, hook.restores) == before


@pytest.mark.llm
def test_a_shared_prefix_is_saved_where_it_ends_so_the_next_question_prefills_only_itself(
    native_model, prefix_engine
):
    """RAG's passages come before its question: saved at the prompt's last block, the state
    would hold the question's first words and serve no other question over the same passages."""
    from .reference import greedy_reference
    from .test_engine_llm import assert_greedy_equivalent

    eng, hook, _metrics = prefix_engine
    text, i = "Answer from the passages.\n", 0
    while len(native_model.tokenize(text)) < 150:
        i += 1
        text += f"[{i}] The lighthouse at cape {i} flashes every {i % 9 + 2} seconds. "
    shared = native_model.tokenize(text)[:150]
    ask = [
        shared + native_model.tokenize(f" Question: {q}? Answer:", add_special=False)
        for q in ("how often does the lighthouse at cape 3 flash", "which cape has the slowest lighthouse")
    ]
    saves, restores = hook.saves, hook.restores
    _, first = run(eng, ask[0], 8, shared_prefix=len(shared))
    assert hook.saves == saves + 1 and hook.cache.keys()[0][1] == 128  # the shared part's last block
    got, second = run(eng, ask[1], 8, shared_prefix=len(shared))
    assert hook.restores == restores + 1 and (first.cached_tokens, second.cached_tokens) == (0, 128)
    assert_greedy_equivalent(greedy_reference(native_model, ask[1], 8), got)


def test_states_past_the_sliding_window_are_not_trimmed_below_what_they_hold():
    """A state whose sliding-window layers dropped positions < min_pos can only serve boundaries
    k with k - window ≥ min_pos (measured: a 704-token state starts at 192 with n_swa = 512)."""
    c = cache(swa_window=32)
    prompt = list(range(200))
    c.put(prompt[:96], b"s", min_pos=40)  # holds positions 40..95 in the window layers
    assert c.lookup([*prompt[:96], 1]).n_tokens == 96
    assert c.lookup(prompt[:80] + [1] * 20).n_tokens == 80  # 80 - 32 ≥ 40
    assert c.lookup(prompt[:70] + [1] * 20) is None  # 64 - 32 < 40


@pytest.mark.llm
def test_a_failing_restore_falls_back_to_prefill(native_model, prefix_engine, monkeypatch):
    from themis_shard.llm import kv_state

    eng, _hook, _ = prefix_engine
    prompt = long_prompt(native_model, 300, "Question: which shard keeps range 74? Answer:")

    def boom(*a, **k):
        raise RuntimeError("simulated llama.cpp failure")

    monkeypatch.setattr(kv_state, "set_seq_state", boom)
    tokens, done = run(eng, prompt, 4)
    assert done.finish_reason in ("stop", "length") and tokens


def test_lora_sequences_neither_restore_nor_save():
    """A LoRA changes K/V in every layer: base-model states must not serve adapter requests."""
    from themis_shard.llm.prefix_hook import EnginePrefixHook
    from themis_shard.llm.sampling import SamplingParams
    from themis_shard.llm.sequence import Sequence

    c = cache()
    c.put(list(range(64)), b"state")
    hook = EnginePrefixHook(c, min_tokens=16)
    seq = Sequence(rid=0, prompt=list(range(100)), params=SamplingParams(), sink=print, adapter="legal")
    seq.slot = 0
    hook.on_admit(None, seq)  # returns before touching the context
    assert seq.n_cached == 0 and seq.prefill_stop == 0
