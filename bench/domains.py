"""What domain detection adds to a request, and how well it labels the shipped sets.

Detection (``themis_shard/domains``) classifies a prompt by the mean of the embedding model's
input token embeddings against per-domain centroids. This prints its per-request cost (p50/p99,
tokenisation included) next to a full MiniLM embedding pass of the same prompts (what a
transformer-embedding detector would cost), measured interleaved, and the labels it gives the
held-out training texts of each shipped domain and a few everyday prompts.

Run: `.venv/bin/python bench/domains.py [--rounds 300]`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from themis_shard.domains.detect import GENERAL
from themis_shard.domains.detector import DomainModel, read_token_table
from themis_shard.domains.sets import shipped_domains, training_texts
from themis_shard.domains.settings import DomainSettings
from themis_shard.llm.embeddings import load_embedder
from themis_shard.llm.settings import LLMSettings

EVERYDAY = [
    "What is the weather like in Paris in spring?",
    "Tell me a story about a dragon who loved to",
    "The best way to cook pasta is to",
    "Hello!",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    emb = load_embedder(LLMSettings(embedding_model="bundled"))
    model = DomainModel(emb.model.tokenize, read_token_table(emb.path), DomainSettings())
    prompts = [t for d in shipped_domains() for t in training_texts(d)] + EVERYDAY
    static, full = [], []
    for i in range(args.rounds):
        p = prompts[i % len(prompts)]
        t0 = time.perf_counter()
        model.classify(p)
        static.append(time.perf_counter() - t0)
        if i % 10 == 0:  # a transformer pass is ~1000× dearer: sample it
            t0 = time.perf_counter()
            emb.embed_sync([p])
            full.append(time.perf_counter() - t0)
    print("| detector | p50 ms | p99 ms | samples |")
    print("|---|---|---|---|")
    for name, xs in (("token-table centroid (shipped)", static), ("MiniLM full pass (for comparison)", full)):
        print(
            f"| {name} | {np.percentile(xs, 50) * 1e3:.3f} | {np.percentile(xs, 99) * 1e3:.3f} | {len(xs)} |"
        )
    print()
    print("| set | texts | detected as its domain | as general | as another domain |")
    print("|---|---|---|---|---|")
    for d in shipped_domains():
        got = [model.classify(t).domain for t in training_texts(d)]
        n, mine, general = len(got), got.count(d), got.count(GENERAL)
        print(f"| {d} (train) | {n} | {mine} | {general} | {n - mine - general} |")
    got = [model.classify(t).domain for t in EVERYDAY]
    print(f"| everyday | {len(got)} | – | {got.count(GENERAL)} | {len(got) - got.count(GENERAL)} |")
    emb.close()


if __name__ == "__main__":
    main()
