"""Storage benchmark: document puts (single, batch, sync), gets, transaction commits, vector
search qps + recall@10 per index type at 100k × 384 (compared with exact flat search), and the
cost of fenced, replicated writes on a real 2-shard RAID1 cluster: one client's PUT rate on the
key's primary at each write concern, and through the other shard (forwarded to the primary);
and single-shard vs cross-shard (two-phase commit) transaction rates and latencies on a real
3-shard RAID1 cluster: 2-key transactions whose keys share a primary, and whose keys have two.

First, the peer comparison (``_storage_peer``): a 3-shard RAID1 Themis next to a 3-member etcd
(Debian's ``etcd-server``; started and stopped here, never installed: ``make bench`` installs it),
same HTTP+JSON client and ~200-byte values at 1/16/64 clients — writes at w=1/majority/all vs
etcd put, reads vs linearizable and serializable range, transactions vs etcd txn, with ratios.

Run: `make bench` or `.venv/bin/python bench/storage.py [--quick] [--peer-clients 1 16 64]
[--peer-seconds 4] [--vectors 100000] [--dim 384] [--cluster-writes 300] [--cluster-txns 300]`
(``0`` skips that part; ``--quick``: the peer comparison alone, 1.5 s per cell;
``--peer-repeats 3``: each cell three times, interleaved, medians and paired ratios printed).
Prints tables; numbers are from this machine in this run (shared, noisy: compare rows, not runs).
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
    from themis_core.plan import ClusterPlan
    from themis_shard.cluster.placement.owners import Topology

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


def bench_cluster_transactions(n: int) -> list[tuple[str, str, str, str, str]]:
    """One client's sequential 2-key transactions on a real 3-shard RAID1 cluster (no model),
    w=all: the single-coordinator fast path next to two-phase commit, side by side."""
    sys.path.insert(0, str(Path(__file__).parent))
    from _local import api_headers, themis
    from themis_core.plan import ClusterPlan
    from themis_shard.cluster.placement.owners import Topology

    rows = []
    doc = {"title": "A document", "body": "x" * 200, "n": 1}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        themis(cwd, "up", "--shards", "3", "--raid-mode", "raid1", "--no-llm", "--base-port", "0")
        try:
            plan = ClusterPlan.load(cwd / ".themis" / "plan.json")
            topo = Topology.of(plan, "shard-0")
            url = {m.shard_id: m.url for m in plan.members}
            keys = [f"k{i}" for i in range(20_000)]

            def on(primary: str, count: int) -> list[str]:
                return [k for k in keys if topo.owners("t", k)[0] == primary][:count]

            def owned_by(owners: list[str], count: int) -> list[str]:
                return [k for k in keys if topo.owners("t", k) == owners][:count]

            pairs = 50
            # one step only when the keys share every owner (else 2PC: transactions/decisions.py)
            mine = owned_by(["shard-0", "shard-1"], 2 * pairs)
            same = list(zip(mine[::2], mine[1::2], strict=True))
            near, far = owned_by(["shard-0", "shard-1"], pairs), owned_by(["shard-0", "shard-2"], pairs)
            split = list(zip(near, far, strict=True))
            cross = list(zip(on("shard-0", pairs), on("shard-1", pairs), strict=True))
            cross_far = list(zip(on("shard-1", 2 * pairs)[pairs:], on("shard-2", pairs), strict=True))
            cases = [
                ("single-shard: both keys on one primary, sent to it", "shard-0", same),
                ("single-shard: both keys on one primary, via another shard", "shard-1", same),
                ("one primary, different other owners (2PC), sent to it", "shard-0", split),
                ("cross-shard (2PC): two primaries, coordinator is one of them", "shard-0", cross),
                ("cross-shard (2PC): two primaries, coordinator is the third shard", "shard-0", cross_far),
            ]
            with httpx.Client(timeout=60, headers=api_headers(cwd)) as c:

                def txn(via: str, pair: tuple[str, str]) -> None:
                    ops = [{"op": "put", "collection": "t", "key": k, "document": doc} for k in pair]
                    c.post(f"{url[via]}/v1/transactions", json={"operations": ops}).raise_for_status()

                for label, via, chosen in cases:
                    for pair in chosen[:10]:  # warm connections and the collection
                        txn(via, pair)
                    latencies = []
                    t = time.perf_counter()
                    for i in range(n):
                        started = time.perf_counter()
                        txn(via, chosen[i % len(chosen)])
                        latencies.append(time.perf_counter() - started)
                    elapsed = time.perf_counter() - t
                    p50, p99 = np.percentile(np.array(latencies) * 1000, [50, 99])
                    rows.append((label, f"{n:,}", rate(n, elapsed), f"{p50:.1f}", f"{p99:.1f}"))
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
    parser.add_argument("--cluster-txns", type=int, default=300)
    parser.add_argument("--peer-clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--peer-seconds", type=float, default=None, help="per cell (default 4, --quick 1.5)")
    parser.add_argument("--quick", action="store_true", help="the peer comparison alone, 1.5 s per cell")
    parser.add_argument(
        "--peer-repeats", type=int, default=1, help="interleaved repeats per cell; medians printed"
    )
    parser.add_argument(
        "--peer-sched",
        choices=["same", "default"],
        default="same",
        help="etcd's CPU scheduling: the shards' policy (SCHED_BATCH by default) or the kernel's default",
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from _storage_peer import compare

    seconds = args.peer_seconds if args.peer_seconds is not None else (1.5 if args.quick else 4.0)
    if seconds:
        compare(args.peer_clients, seconds, repeats=args.peer_repeats, peer_sched=args.peer_sched)
    if args.quick:
        return
    with tempfile.TemporaryDirectory() as tmp:
        doc_rows = bench_documents(Path(tmp) / "db", args.single, args.batch)
    if args.cluster_writes:
        doc_rows += bench_cluster_writes(args.cluster_writes)
    print("\n| operation | n | rate |\n|---|---:|---:|")
    for row in doc_rows:
        print("| " + " | ".join(row) + " |")
    if args.cluster_txns:
        print(
            "\n| single-shard vs cross-shard transaction rate (2-key, 3 shards, RAID1, w=all) "
            "| n | txns/s | p50 ms | p99 ms |"
        )
        print("|---|---:|---:|---:|---:|")
        for row in bench_cluster_transactions(args.cluster_txns):
            print("| " + " | ".join(row) + " |")
    if not args.vectors:
        return
    print(f"\n| index ({args.vectors:,} × {args.dim}) | build | qps (1 query/call) | recall@10 vs flat |")
    print("|---|---:|---:|---:|")
    for row in bench_vectors(args.vectors, args.dim, args.queries):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
