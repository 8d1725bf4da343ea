"""Storage benchmark: document puts (single, batch, sync), gets, transaction commits, and vector
search qps + recall@10 per index type at 100k × 384 (compared with exact flat search).

Run: `make bench` or `.venv/bin/python bench/storage.py [--vectors 100000] [--dim 384]`.
Prints a table; numbers are from this machine in this run (shared, noisy: compare rows, not runs).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from themis_shard.storage.collections import CollectionConfig
from themis_shard.storage.documents import DocumentStore, Write
from themis_shard.vector.index import VectorIndex


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s"


def bench_documents(path: Path, n_single: int, n_batch: int) -> list[tuple[str, str, str]]:
    store = DocumentStore(path)
    rows = []
    doc = {"title": "A document", "body": "x" * 200, "n": 1}
    t = time.perf_counter()
    for i in range(n_single):
        store.put("single", f"k{i}", doc)
    rows.append(("document put, single (sync WAL)", f"{n_single:,}", rate(n_single, time.perf_counter() - t)))
    t = time.perf_counter()
    for start in range(0, n_batch, 1000):
        store.commit([Write("batch", f"k{i}", doc) for i in range(start, min(start + 1000, n_batch))])
    rows.append(
        ("document put, batch of 1000 (sync WAL)", f"{n_batch:,}", rate(n_batch, time.perf_counter() - t))
    )
    keys = [f"k{i}" for i in np.random.default_rng(0).integers(0, n_batch, 50_000)]
    t = time.perf_counter()
    for k in keys:
        store.get("batch", k)
    rows.append(("document get (random key)", f"{len(keys):,}", rate(len(keys), time.perf_counter() - t)))
    n_tx = max(n_single // 2, 1)
    t = time.perf_counter()
    for i in range(n_tx):
        tx = store.begin()
        a = tx.get("batch", f"k{i}")
        tx.put("batch", f"k{i}", {**a, "n": a["n"] + 1})
        tx.put("batch", f"k{i + 1}", doc)
        tx.commit()
    rows.append(("transaction commit (2 reads, 2 writes)", f"{n_tx:,}", rate(n_tx, time.perf_counter() - t)))
    store.close()
    return rows


def bench_vectors(n: int, dim: int, n_queries: int) -> list[tuple[str, str, str, str]]:
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(256, dim)).astype(np.float32)
    data = (centers[rng.integers(0, 256, n)] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)
    queries = (centers[rng.integers(0, 256, n_queries)] + 0.3 * rng.normal(size=(n_queries, dim))).astype(
        np.float32
    )
    keys = [f"k{i}" for i in range(n)]
    rows = []
    truth = None
    for kind in ("flat", "ivf", "hnsw"):
        index = VectorIndex(CollectionConfig(name="b", dimension=dim, index=kind))
        t = time.perf_counter()
        index.rebuild(keys, data)
        build = time.perf_counter() - t
        t = time.perf_counter()
        results = [[h.key for h in index.search(q, 10)] for q in queries]
        qps = n_queries / (time.perf_counter() - t)
        if truth is None:
            truth = results
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(results, truth, strict=True)])
        rows.append((kind, f"{build:.1f}s", f"{qps:,.0f}", f"{recall:.3f}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--single", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        doc_rows = bench_documents(Path(tmp) / "db", args.single, args.batch)
    print("\n| operation | n | rate |\n|---|---:|---:|")
    for row in doc_rows:
        print("| " + " | ".join(row) + " |")
    print(f"\n| index ({args.vectors:,} × {args.dim}) | build | qps (1 query/call) | recall@10 vs flat |")
    print("|---|---:|---:|---:|")
    for row in bench_vectors(args.vectors, args.dim, args.queries):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
