"""Speculative decoding benchmark: plain vs draft sources, fixed and adaptive n_draft.

One run, same prompts, single stream, in-process engine (no HTTP), the bundled Gemma 3 270M.
Rounds are interleaved (every configuration once per prompt and round, in a shuffled order) so
the shared machine's noise and any order effect hit all rows alike; per configuration we report
generated tokens/s (sum of tokens / sum of request time, TTFT included), the speedup against
plain on the same prompts, the acceptance rate (accepted / drafted) and the mean accepted
length per verify round.

Prompt sets: "rag" — answers that quote a context passage (prompt lookup's strong case);
"open" — open-ended prompts, greedy (a 270M model soon repeats itself, so lookup still finds
matches); "sampled" — the open prompts at temperature 0.8 (fixed seeds): little repeats, drafts
are often wrong, and speculation must not cost anything there (the adaptive rows).

Draft sources: prompt lookup (always); with ``--draft-gguf`` (e.g. made with
``python -m themis_shard.llm.tools.draft_model bundled OUT --keep 15``) a local draft model and
the same model as a remote draft shard (``/internal/draft`` on a local uvicorn, same cores).

Run: `.venv/bin/python bench/speculative.py [--rounds 2] [--max-tokens 64] [--draft-gguf PATH]`.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shard"))

from prometheus_client import CollectorRegistry
from themis_shard.llm.engine import Engine, EngineConfig
from themis_shard.llm.metrics import LLMMetrics
from themis_shard.llm.model import resolve_model_path
from themis_shard.llm.native import NativeModel, quiet_native_logs
from themis_shard.llm.sampling import SamplingParams
from themis_shard.llm.scheduler import Limits
from themis_shard.llm.sequence import TokenEvent
from themis_shard.llm.speculative.adaptive import AdaptiveConfig, CostModel
from themis_shard.llm.speculative.drafts import PromptLookup
from themis_shard.llm.speculative.speculator import Speculator


class Switch:
    """One engine, several speculators in turn: the engine takes its speculator at construction,
    so the bench hands it this and points ``current`` at the configuration under test."""

    def __init__(self) -> None:
        self.current: Speculator | None = None

    @property
    def concurrent(self) -> bool:
        return self.current is not None and self.current.concurrent

    def drafts_at(self, decoding: int) -> bool:
        return self.current is not None and self.current.drafts_at(decoding)

    def draft(self, seq, limit):
        return self.current.draft(seq, limit) if self.current is not None else None

    def verify(self, seq, draft, rows):
        return self.current.verify(seq, draft, rows)

    def observe_iteration(self, seconds: float, extra_rows: int) -> None:
        if self.current is not None:
            self.current.observe_iteration(seconds, extra_rows)

    def release(self, seq) -> None:
        if self.current is not None:
            self.current.release(seq)

    def calibrate(self, measure) -> None:
        """Each configuration brings its own cost model: nothing to measure for the switch."""


RAG = [
    (
        "Context: The Themis cluster stores documents in RocksDB column families and replicates every "
        "shard three times. Vector search uses a FAISS IVF index with 1024 lists and nprobe 8. Each "
        "shard also runs a llama.cpp inference engine with continuous batching.\n"
        "Question: Repeat the context word for word.\nAnswer: The Themis cluster stores documents in"
    ),
    (
        "Document: Photosynthesis is the process by which green plants use sunlight, water and carbon "
        "dioxide to produce glucose and oxygen. It takes place in the chloroplasts, which contain the "
        "pigment chlorophyll.\nTask: Quote the document's first sentence exactly.\n"
        "Quote: Photosynthesis is the process by which"
    ),
    (
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
        "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n    return a / b\n\n\n"
        "# the same four functions again, unchanged:\ndef add(a, b):\n"
    ),
]
OPEN = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a refrigerator works.",
]


class Run:
    def __init__(self) -> None:
        self.n = 0
        self.done = threading.Event()

    def __call__(self, ev) -> None:
        if isinstance(ev, TokenEvent):
            self.n += ev.token_id >= 0
        else:
            self.done.set()


def start_draft_shard(gguf: str, threads: int) -> str:
    import socket

    import uvicorn
    from fastapi import FastAPI
    from themis_shard.api import draft as draft_api
    from themis_shard.api.errors import install_error_handlers
    from themis_shard.llm.speculative.local_draft import LocalDraftModel
    from themis_shard.llm.speculative.remote import DraftService

    app = FastAPI()
    install_error_handlers(app)
    app.include_router(
        draft_api.fixed_draft_router(DraftService(LocalDraftModel.open(gguf, n_ctx=2048, n_threads=threads)))
    )
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}"


def measure(rounds: int, max_tokens: int, threads: int, draft_gguf: str, sets: str) -> dict:
    """Every configuration on every prompt, interleaved: ``stats[(configuration, prompt set)]`` is
    [tokens, seconds, drafted, accepted, verify rounds]; also the configuration and set names and
    the learnt verify-cost table (ms by extra logits rows)."""
    quiet_native_logs()
    model = NativeModel(resolve_model_path("bundled"), n_gpu_layers=0)
    cfg = EngineConfig(n_ctx=2048, n_threads=threads, limits=Limits(max_running=4))
    metrics = LLMMetrics(CollectorRegistry())
    switch = Switch()
    eng = Engine(model, cfg, metrics=metrics, speculator=switch)
    cost = CostModel()  # shared: the engine's verify cost is one fact, whatever the source
    size = model.path.stat().st_size  # the draft-cost prior compares draft and target sizes

    configs: dict[str, Speculator | None] = {"plain": None}
    for name, ad, n in (
        ("lookup fixed n=8", False, 8),
        ("lookup fixed n=3", False, 3),
        ("lookup adaptive", True, 8),
    ):
        configs[name] = Speculator(
            PromptLookup(2, 4), AdaptiveConfig(n_max=n, adaptive=ad), cost=cost, target_bytes=size
        )
    if draft_gguf:
        from themis_shard.llm.speculative.local_draft import LocalDraftModel

        local = LocalDraftModel.open(draft_gguf, n_ctx=2048, n_threads=threads)
        for name, ad in (("local fixed n=4", False), ("local adaptive", True)):
            configs[name] = Speculator(
                local, AdaptiveConfig(n_max=4 if not ad else 8, adaptive=ad), cost=cost, target_bytes=size
            )
        # The same draft model behind /internal/draft on a local uvicorn (same 2 cores: this row
        # shows the protocol's overhead, not a faster draft machine).
        from themis_shard.llm.speculative.remote import RemoteDraft

        remote = RemoteDraft(start_draft_shard(draft_gguf, threads), timeout_s=2.0)
        for name, ad in (("remote fixed n=4", False), ("remote adaptive", True)):
            configs[name] = Speculator(
                remote, AdaptiveConfig(n_max=4 if not ad else 8, adaptive=ad), cost=cost, target_bytes=size
            )
    eng.start()

    prompts = {
        "rag": [model.tokenize(p) for p in RAG],
        "open": [model.tokenize(p) for p in OPEN],
        "sampled": [model.tokenize(p) for p in OPEN],
    }
    prompts = {k: v for k, v in prompts.items() if k in sets.split(",")}
    stats = {
        (c, s): [0, 0.0, 0, 0, 0] for c in configs for s in prompts
    }  # tokens, secs, drafted, accepted, rounds
    for r in range(rounds):
        for set_name, plist in prompts.items():
            for i, toks in enumerate(plist):
                if set_name == "sampled":
                    params = SamplingParams(max_tokens=max_tokens, temperature=0.8, seed=100 * r + i)
                else:
                    params = SamplingParams(max_tokens=max_tokens)
                order = list(configs.items())
                random.Random(1000 * r + i).shuffle(order)  # no configuration always runs first
                for cname, spec in order:
                    switch.current = spec
                    run = Run()
                    t0 = time.perf_counter()
                    seq = eng.submit(toks, params, run, speculative=spec is not None)
                    assert run.done.wait(300)
                    dt = time.perf_counter() - t0
                    st = stats[(cname, set_name)]
                    st[0] += run.n
                    st[1] += dt
                    if seq.spec is not None:
                        st[2] += seq.spec.drafted
                        st[3] += seq.spec.accepted
                        st[4] += seq.spec.rounds
    eng.stop()
    return {"stats": stats, "configs": list(configs), "sets": list(prompts), "cost": cost.table(8)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--draft-gguf", default="")
    ap.add_argument("--sets", default="rag,open,sampled", help="prompt sets to run (comma-separated)")
    args = ap.parse_args()
    m = measure(args.rounds, args.max_tokens, args.threads, args.draft_gguf, args.sets)
    stats, configs, prompts = m["stats"], m["configs"], m["sets"]
    print(f"\nspeculative decoding, 1 stream, {args.max_tokens} tokens, {args.rounds} rounds")
    table = ", ".join(f"{k}: {t * 1e3:.0f}" for k, t in enumerate(m["cost"]))
    print(f"learnt verify cost (ms by extra logits rows): {table}\n")
    print(f"{'prompts':7} {'configuration':20} {'tok/s':>7} {'vs plain':>8} {'accept':>7} {'acc/round':>9}")
    for set_name in prompts:
        plain = stats[("plain", set_name)]
        base = plain[0] / plain[1]
        for cname in configs:
            tok, secs, dr, acc, rounds = stats[(cname, set_name)]
            rate = tok / secs
            ar = f"{acc / dr:7.2f}" if dr else f"{'-':>7}"
            al = f"{acc / rounds:9.2f}" if rounds else f"{'-':>9}"
            print(f"{set_name:7} {cname:20} {rate:7.1f} {rate / base:8.2f}x {ar} {al}")
    if args.draft_gguf:
        print("\nE2E latency remote/local draft (same draft model, same cores, fixed n=4):")
        for set_name in prompts:
            loc, rem = stats[("local fixed n=4", set_name)], stats[("remote fixed n=4", set_name)]
            print(
                f"  {set_name:7} {rem[1] / loc[1]:.2f}x  (per token: {rem[1] / rem[0] * 1e3:.1f} ms vs "
                f"{loc[1] / loc[0] * 1e3:.1f} ms)"
            )


if __name__ == "__main__":
    main()
