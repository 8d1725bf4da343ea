"""Speculative decoding inside the engine, on the real bundled model (llama.cpp, 2 threads)."""

from __future__ import annotations

import json

import pytest
from prometheus_client import CollectorRegistry
from themis_shard.llm.engine import Engine, EngineConfig
from themis_shard.llm.metrics import LLMMetrics
from themis_shard.llm.sampling import SamplingParams
from themis_shard.llm.scheduler import Limits
from themis_shard.llm.speculative.adaptive import AdaptiveConfig
from themis_shard.llm.speculative.calibration import VerifyCostTable
from themis_shard.llm.speculative.drafts import Draft, PromptLookup
from themis_shard.llm.speculative.speculator import Speculator

from .reference import greedy_reference
from .test_engine_llm import Collector, assert_greedy_equivalent

pytestmark = pytest.mark.llm

RAG_PROMPT = (
    "Context: The Themis cluster stores documents in RocksDB column families and replicates "
    "every shard three times. Vector search uses a FAISS IVF index with 1024 lists and nprobe 8.\n"
    "Question: How does the Themis cluster store documents and how is vector search done?\n"
    "Answer (quote the context): The Themis cluster stores documents in"
)
N = 40


def make_engine(
    model, source, config: AdaptiveConfig, registry=None, *, calibration: VerifyCostTable | None = None
) -> tuple[Engine, LLMMetrics]:
    metrics = LLMMetrics(registry or CollectorRegistry())
    cfg = EngineConfig(
        n_ctx=1024, n_threads=2, page_size=16, max_queue=16, limits=Limits(max_running=4, chunk=512)
    )
    speculator = Speculator(source, config, metrics=metrics, calibration=calibration)
    eng = Engine(model, cfg, metrics=metrics, speculator=speculator)
    eng.start()
    return eng, metrics


def run(eng: Engine, prompt: list[int], params: SamplingParams, *, speculative: bool = True) -> Collector:
    c = Collector()
    eng.submit(prompt, params, c, speculative=speculative)
    assert c.done.finish_reason in ("stop", "length")
    return c


@pytest.fixture(scope="module")
def rag(native_model):
    toks = native_model.tokenize(RAG_PROMPT)
    return toks, greedy_reference(native_model, toks, N)


def counter(metrics: LLMMetrics, name: str) -> float:
    return getattr(metrics, name).labels(model="default", source="prompt_lookup")._value.get()


@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed8", "adaptive"])
def test_prompt_lookup_greedy_matches_plain(native_model, rag, adaptive):
    prompt, ref = rag
    eng, metrics = make_engine(native_model, PromptLookup(), AdaptiveConfig(n_max=8, adaptive=adaptive))
    try:
        c = run(eng, prompt, SamplingParams(max_tokens=N))
        assert_greedy_equivalent(ref, c.tokens)
        drafted, accepted = counter(metrics, "spec_draft_tokens"), counter(metrics, "spec_accepted_tokens")
        assert drafted > 0 and 0 < accepted <= drafted
    finally:
        eng.stop()


def test_the_engine_times_its_verify_rounds_before_its_first_request_once_per_machine(
    native_model, rag, tmp_path
):
    """Start-up measures verify(k) on the engine's own context and keeps it; the next engine on
    this machine reads it back; draft lengths priced by it still give the greedy answer."""
    prompt, ref = rag
    table = VerifyCostTable(tmp_path, "gemma-2-threads")
    eng, metrics = make_engine(native_model, PromptLookup(), AdaptiveConfig(n_max=8), calibration=table)
    try:
        kept = tmp_path / "verify-costs-gemma-2-threads.json"
        seconds = json.loads(kept.read_text())["seconds"]
        assert len(seconds) == 9 and all(s > 0 for s in seconds)
        assert seconds[8] > seconds[0]  # nine logits rows of a 262k vocabulary are not free
        first = run(eng, prompt, SamplingParams(max_tokens=N))
        assert_greedy_equivalent(ref, first.tokens)
        assert counter(metrics, "spec_accepted_tokens") > 0
    finally:
        eng.stop()
    written = kept.stat().st_mtime_ns
    again, _ = make_engine(native_model, PromptLookup(), AdaptiveConfig(n_max=8), calibration=table)
    try:
        assert kept.stat().st_mtime_ns == written  # read back, not measured again
        assert run(again, prompt, SamplingParams(max_tokens=N)).tokens == first.tokens
    finally:
        again.stop()


class Scripted:
    """A draft source that proposes fixed tokens: lets the test know exactly what gets accepted."""

    name = "prompt_lookup"  # reuse the metric labels of the counter helper
    per_token_cost = False

    def __init__(self, continuation: list[int], wrong_every: int) -> None:
        self.continuation = continuation
        self.wrong_every = wrong_every
        self.start = 0

    def propose(self, key, tokens, k, params=None) -> Draft:
        from themis_shard.llm.speculative.rejection import Dist

        i = len(tokens) - self.start
        out = list(self.continuation[i : i + k])
        for j in range(len(out)):
            if (i + j) % self.wrong_every == self.wrong_every - 1:
                out[j] = (out[j] + 1) % 1000 + 10  # a token the target does not pick
        return Draft(out, [Dist.point(t) for t in out])

    def commit(self, key, tokens) -> None:
        pass

    def release(self, key) -> None:
        pass


def test_acceptance_metric_counts_exactly(native_model, rag):
    prompt, (ref_tokens, _) = rag
    src = Scripted(ref_tokens, wrong_every=5)
    src.start = len(prompt)
    eng, metrics = make_engine(native_model, src, AdaptiveConfig(n_max=4, adaptive=False, min_acceptance=0.0))
    try:
        c = run(eng, prompt, SamplingParams(max_tokens=20))
        assert c.tokens == ref_tokens[:20]
        drafted, accepted = counter(metrics, "spec_draft_tokens"), counter(metrics, "spec_accepted_tokens")
        # Replay the script: the first token comes from prefill; each round drafts min(4, room)
        # tokens of the reference with every 5th one wrong, accepts up to the first wrong one and
        # emits the target's own token after the accepted ones.
        exp_d = exp_a = 0
        pos = 1
        while pos < 20:
            k = min(4, 20 - pos - 1)
            if k <= 0:
                pos += 1
                continue
            wrong = [j for j in range(k) if (pos + j) % 5 == 4]
            acc = wrong[0] if wrong else k
            exp_d += k
            exp_a += acc
            pos += acc + 1
        assert (drafted, accepted) == (exp_d, exp_a)
    finally:
        eng.stop()


@pytest.fixture(scope="module")
def draft_gguf(model_path):
    """The 15-of-18-layer draft, derived once (~30 s: GGUFReader parses the 262k vocabulary) and
    kept in the artifact cache keyed by the verify model's sha256."""
    from themis_shard.llm.artifacts import cache_root, materialise
    from themis_shard.llm.model import sha256_file
    from themis_shard.llm.tools.draft_model import derive_draft

    out = cache_root() / f"draft15-{sha256_file(model_path)[:16]}.gguf"
    return materialise(out, lambda tmp: derive_draft(model_path, tmp, 15), what="the 15-layer draft")


def test_draft_tool_records_what_it_is_a_draft_of(draft_gguf, model_path):
    from themis_shard.llm.model import sha256_file
    from themis_shard.llm.native import NativeModel
    from themis_shard.llm.tools.draft_model import draft_info

    info = draft_info(draft_gguf)
    assert info["of_sha256"] == sha256_file(model_path)
    assert (info["keep_layers"], info["of_n_layers"]) == (15, 18)
    m = NativeModel(draft_gguf, n_gpu_layers=0)
    try:
        assert m.meta("gemma3.block_count") == "15"
    finally:
        m.close()


def test_local_draft_model_greedy_matches_plain(native_model, rag, draft_gguf):
    from themis_shard.llm.speculative.local_draft import LocalDraftModel

    prompt, ref = rag
    src = LocalDraftModel.open(draft_gguf, n_ctx=1024, n_seq_max=4, n_threads=2)
    eng, metrics = make_engine(native_model, src, AdaptiveConfig(n_max=4, adaptive=False))
    try:
        c = run(eng, prompt, SamplingParams(max_tokens=N))
        assert_greedy_equivalent(ref, c.tokens)
        lab = {"model": "default", "source": "local"}
        drafted = metrics.spec_draft_tokens.labels(**lab)._value.get()
        accepted = metrics.spec_accepted_tokens.labels(**lab)._value.get()
        assert drafted > 0 and accepted / drafted > 0.5  # 15/18 layers: ~90 % agreement on quoting text
    finally:
        eng.stop()
        src.close()


@pytest.fixture(scope="module")
def draft_server(draft_gguf):
    """A draft shard: the real /internal/draft router over the 15-layer draft, on uvicorn."""
    from fastapi import FastAPI
    from themis_shard.api import draft as draft_api
    from themis_shard.api.errors import install_error_handlers
    from themis_shard.llm.speculative.local_draft import LocalDraftModel
    from themis_shard.llm.speculative.remote import DraftService
    from themis_testing.app_server import Server

    app = FastAPI()
    install_error_handlers(app)
    local = LocalDraftModel.open(draft_gguf, n_ctx=1024, n_seq_max=4, n_threads=2)
    app.include_router(draft_api.fixed_draft_router(DraftService(local)))
    srv = Server(app).__enter__()
    yield srv
    srv.__exit__(None, None, None)
    local.close()


def test_remote_draft_greedy_matches_plain_then_survives_the_draft_shard_dying(
    native_model, rag, draft_server
):
    from themis_shard.llm.speculative.remote import RemoteDraft

    prompt, ref = rag
    src = RemoteDraft(draft_server.url, timeout_s=2.0)
    eng, metrics = make_engine(
        native_model, src, AdaptiveConfig(n_max=4, adaptive=False, cooldown=2, recheck=2)
    )
    lab = {"model": "default", "source": "remote"}
    try:
        c = run(eng, prompt, SamplingParams(max_tokens=16))
        assert_greedy_equivalent((ref[0][:16], ref[1][:16]), c.tokens)
        assert metrics.spec_accepted_tokens.labels(**lab)._value.get() > 0
        assert metrics.draft_roundtrip.labels(**lab)._sum.get() > 0

        # Kill the draft shard once the second request has produced a few tokens: the sink runs on
        # the engine thread, so generation is held until the server is gone.
        killed = []

        class KillAfter(Collector):
            def __call__(self, ev) -> None:
                super().__call__(ev)
                if len(self.tokens) >= 6 and not killed:
                    draft_server.__exit__(None, None, None)
                    killed.append(True)

        k = KillAfter()
        eng.submit(prompt, SamplingParams(max_tokens=N), k, speculative=True)
        assert k.done.finish_reason in ("length", "stop")
        assert killed
        assert_greedy_equivalent(ref, k.tokens)
        assert metrics.spec_fallback.labels(reason="draft_error", **lab)._value.get() >= 1
    finally:
        eng.stop()
        src.close()


def test_rejection_on_real_logits_matches_target_distribution(native_model):
    """Temperature 1, top-k 8 (a small vocabulary slice) on a real logits row; the draft proposes
    from a flatter distribution over a different slice; 1-step outputs follow the target
    (chi-square, fixed seed)."""
    import numpy as np
    from themis_shard.llm.native import Batch, NativeContext
    from themis_shard.llm.speculative.rejection import target_dist, verify_chain

    from .test_speculative_rejection import chi_square_p

    ctx = NativeContext(native_model, n_ctx=256, n_seq_max=1, n_batch=64, n_ubatch=64, n_threads=2)
    try:
        b = Batch(64)
        b.add(native_model.tokenize("My favourite colour is"), 0, 0)
        assert ctx.decode(b) == 0
        row = ctx.logits(b.n - 1).copy()
    finally:
        ctx.close()
    p = target_dist(row, SamplingParams(temperature=1.0, top_k=8))
    q = target_dist(row, SamplingParams(temperature=3.0, top_k=12))
    rng = np.random.default_rng(7)
    index = {int(t): i for i, t in enumerate(p.ids)}
    counts = np.zeros(len(p.ids))
    for _ in range(6000):
        x = q.sample(rng)
        k, nxt = verify_chain([x], [q], [p, p], rng)
        counts[index[x if k else nxt]] += 1
    assert chi_square_p(counts, p.probs) > 0.001


def test_sampled_speculative_requests_are_seed_reproducible(native_model, rag):
    prompt, _ = rag
    eng, _ = make_engine(native_model, PromptLookup(), AdaptiveConfig(n_max=4, adaptive=False))
    try:
        params = SamplingParams(max_tokens=24, temperature=0.8, top_p=0.95, seed=11)
        a, b = run(eng, prompt, params), run(eng, prompt, params)
        assert a.tokens == b.tokens and len(a.tokens) > 0
    finally:
        eng.stop()


def test_remote_style_drafts_for_several_sequences_are_fetched_at_once(native_model, rag):
    """A ``concurrent`` source (a draft shard: I/O bound) is asked for every decoding sequence's
    draft in parallel, so one iteration waits for the slowest round trip, not for their sum."""
    import threading
    import time

    class SlowLookup(PromptLookup):
        name = "remote"
        concurrent = True

        def __init__(self) -> None:
            super().__init__(2, 4)
            self.in_flight = self.most_in_flight = 0
            self.lock = threading.Lock()

        def propose(self, key, tokens, k, params=None):
            with self.lock:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            time.sleep(0.05)  # a round trip
            with self.lock:
                self.in_flight -= 1
            return super().propose(key, tokens, k, params)

    prompt, ref = rag
    src = SlowLookup()
    eng, _ = make_engine(native_model, src, AdaptiveConfig(n_max=4, adaptive=False))
    try:
        runs = [Collector() for _ in range(3)]
        for c in runs:
            eng.submit(prompt, SamplingParams(max_tokens=16), c, speculative=True)
        for c in runs:
            assert c.done.finish_reason in ("stop", "length")
            assert_greedy_equivalent((ref[0][:16], ref[1][:16]), c.tokens)
        assert src.most_in_flight >= 2
    finally:
        eng.stop()
