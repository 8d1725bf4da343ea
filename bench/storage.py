"""Storage benchmark: document puts (single, batch, sync), gets, transaction commits, vector
search qps + recall@10 per index type at 100k × 384 (compared with exact flat search), and the
cost of fenced, replicated writes on a real 2-shard RAID1 cluster: one client's PUT rate on the
key's primary at each write concern, and through the other shard (forwarded to the primary).

Run: `make bench` or `.venv/bin/python bench/storage.py [--vectors 100000] [--dim 384]
[--cluster-writes 300]` (``--cluster-writes 0`` skips the cluster).
Prints a table; numbers are from this machine in this run (shared, noisy: compare rows, not runs).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
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


def bench_cluster_writes(n: int) -> list[tuple[str, str, str]]:
    """Sequential PUTs of a 200-byte document on a real 2-shard RAID1 cluster (no model)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from _local import themis
    from themis_shard.cluster.placement import Topology
    from themis_shard.plan import ClusterPlan

    rows = []
    doc = {"title": "A document", "body": "x" * 200, "n": 1}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        themis(cwd, "up", "--shards", "2", "--raid-mode", "raid1", "--no-llm", "--base-port", "0")
        try:
            plan = ClusterPlan.load(cwd / ".themis" / "plan.json")
            topo = Topology.of(plan, "shard-0")
            url = {m.shard_id: m.url for m in plan.members}
            keys = [k for k in (f"k{i}" for i in range(4 * n)) if topo.owners("w", k)[0] == "shard-0"][:n]
            cases = [
                ("replicated put on the primary, w=all (default)", "shard-0", "all"),
                ("replicated put on the primary, w=1", "shard-0", "1"),
                ("replicated put via the other shard (forwarded), w=all", "shard-1", "all"),
            ]
            with httpx.Client(timeout=60) as c:
                for k in keys[:20]:  # warm connections and the collection
                    c.put(f"{url['shard-0']}/v1/collections/w/documents/{k}", json=doc).raise_for_status()
                for label, via, w in cases:
                    t = time.perf_counter()
                    for k in keys:
                        c.put(f"{url[via]}/v1/collections/w/documents/{k}?w={w}", json=doc).raise_for_status()
                    rows.append((label, f"{len(keys):,}", rate(len(keys), time.perf_counter() - t)))
        finally:
            themis(cwd, "down")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--single", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--vectors", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--cluster-writes", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        doc_rows = bench_documents(Path(tmp) / "db", args.single, args.batch)
    if args.cluster_writes:
        doc_rows += bench_cluster_writes(args.cluster_writes)
    print("\n| operation | n | rate |\n|---|---:|---:|")
    for row in doc_rows:
        print("| " + " | ".join(row) + " |")
    if not args.vectors:
        return
    print(f"\n| index ({args.vectors:,} × {args.dim}) | build | qps (1 query/call) | recall@10 vs flat |")
    print("|---|---:|---:|---:|")
    for row in bench_vectors(args.vectors, args.dim, args.queries):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
