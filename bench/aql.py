"""AQL benchmark: parse+plan time per statement kind (pure, in-process), and end-to-end latency
on a real 3-shard local cluster (RAID1) of a point lookup, a filtered scan of 10k documents and
a k=10 similarity query — each next to the REST call that does the same work, as the baseline.

    PYTHONPATH=shard .venv/bin/python bench/aql.py [--quick] [--docs 10000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "shard"), str(ROOT / "client"), str(ROOT)]

from themis_client import ThemisClient  # noqa: E402
from themis_shard.aql.parser import parse  # noqa: E402
from themis_shard.aql.planner import plan  # noqa: E402
from themis_shard.storage.collections import CollectionConfig  # noqa: E402

from e2e.conftest import LocalCluster  # noqa: E402

DIM = 32
STATEMENTS = {
    "scan+filter+sort+limit": (
        "FOR d IN items FILTER d.grp == @g AND d.n > 10 SORT d.n DESC LIMIT 10 RETURN {k: d._key, n: d.n}",
        {"g": "g1"},
    ),
    "point lookup": ("FOR d IN items FILTER d._key == @k RETURN d", {"k": "i1"}),
    "join": (
        "FOR u IN users FOR o IN orders FILTER o.user == u._key SORT o.total DESC LIMIT 5 "
        "RETURN [u.name, o.total]",
        {},
    ),
    "similarity k=10": (
        "FOR d IN items FILTER d.grp == 'g1' SORT SIMILARITY(d.embedding, @v) DESC LIMIT 10 RETURN d._key",
        {"v": [0.0] * DIM},
    ),
    "insert": ("INSERT {_key: @k, n: 1} INTO items", {"k": "x"}),
    "upsert": ("UPSERT @k INSERT {n: 1} UPDATE {n: 2} IN items", {"k": "x"}),
    "infer": ("INFER 'gemma' @p DOMAIN 'legal' OPTIONS {max_tokens: 8}", {"p": "hello"}),
    "batch infer": ("FOR r IN @reqs INFER 'gemma' r.prompt DOMAIN r.domain", {"reqs": []}),
    "rag": ("RAG @q FROM items TOP 3 DOMAIN 'legal'", {"q": "what?"}),
    "explain": ("EXPLAIN FOR d IN items FILTER d.n > 3 SORT d.n LIMIT 5 RETURN d", {}),
}
COLLECTIONS = {
    "items": CollectionConfig(name="items", dimension=DIM),
    "users": CollectionConfig(name="users"),
    "orders": CollectionConfig(name="orders"),
}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def row(*cells, widths=(28, 12, 12, 12)) -> str:
    return "".join(
        str(c).ljust(w) if i == 0 else str(c).rjust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=False))
    )


def bench_parse_plan(n: int) -> None:
    print(f"\n== parse + plan per statement kind (µs, {n} runs, uncached parse) ==")
    print(row("statement", "parse p50", "plan p50", "total p99"))
    parse("RETURN 1")  # build the LALR tables once (≈0.4 s), as a shard does on its first query
    for name, (text, binds) in STATEMENTS.items():
        parses, plans, totals = [], [], []
        for _ in range(n):
            t0 = time.perf_counter()
            query = parse(text)
            t1 = time.perf_counter()
            plan(query, binds, COLLECTIONS)
            t2 = time.perf_counter()
            parses.append(t1 - t0)
            plans.append(t2 - t1)
            totals.append(t2 - t0)
        print(
            row(
                name,
                f"{statistics.median(parses) * 1e6:.0f}",
                f"{statistics.median(plans) * 1e6:.0f}",
                f"{pct(totals, 0.99) * 1e6:.0f}",
            )
        )


def timed(client: ThemisClient, n: int, call) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        call(client, i)  # a refusal raises its typed error
        out.append(time.perf_counter() - t0)
    return out


def bench_cluster(docs: int, n: int) -> None:
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp), 3)
        try:
            cluster.start_all()
            with ThemisClient(cluster.url("shard-0"), timeout=120) as c:
                c.declare_collection("items", dimension=DIM)
                started = time.perf_counter()
                for start in range(0, docs, 1000):
                    items = {
                        f"i{j}": {
                            "n": j,
                            "grp": f"g{j % 10}",
                            "embedding": [rng.uniform(-1, 1) for _ in range(DIM)],
                        }
                        for j in range(start, min(docs, start + 1000))
                    }
                    c.batch("items", items)
                print(
                    f"\n== 3-shard cluster (RAID1), {docs} documents, dim {DIM}: seeded in "
                    f"{time.perf_counter() - started:.1f}s =="
                )

                keys = [f"i{rng.randrange(docs)}" for _ in range(n)]
                vectors = [[rng.uniform(-1, 1) for _ in range(DIM)] for _ in range(n)]
                scan = "FOR d IN items FILTER d.grp == 'g3' RETURN d.n"
                cases = [
                    (
                        "point lookup (AQL)",
                        n,
                        lambda cl, i: cl.aql("FOR d IN items FILTER d._key == @k RETURN d", {"k": keys[i]}),
                    ),
                    ("point lookup (GET)", n, lambda cl, i: cl.get("items", keys[i])),
                    ("filtered scan 10% (AQL)", max(5, n // 10), lambda cl, i: cl.aql(scan)),
                    (
                        "scan+SORT+LIMIT 10 (AQL)",
                        max(5, n // 10),
                        lambda cl, i: cl.aql(
                            "FOR d IN items FILTER d.n % 7 == 0 SORT d.n DESC LIMIT 10 RETURN d.n"
                        ),
                    ),
                    (
                        "similarity k=10 (AQL)",
                        n,
                        lambda cl, i: cl.aql(
                            "FOR d IN items SORT SIMILARITY(d.embedding, @v) DESC LIMIT 10 RETURN d._key",
                            {"v": vectors[i]},
                        ),
                    ),
                    ("similarity k=10 (REST)", n, lambda cl, i: cl.search("items", vector=vectors[i], k=10)),
                ]
                print(row("query", "p50 ms", "p99 ms", "mean ms"))
                for name, count, call in cases:
                    timed(c, 2, call)  # warm-up (connections, caches)
                    xs = timed(c, count, call)
                    print(
                        row(
                            name,
                            f"{statistics.median(xs) * 1e3:.1f}",
                            f"{pct(xs, 0.99) * 1e3:.1f}",
                            f"{statistics.fmean(xs) * 1e3:.1f}",
                        )
                    )
                stats = c.aql(scan).stats
                print(
                    f"(filtered scan: {stats['scanned']} rows scanned on "
                    f"{len(stats['shards'])} shards, "
                    f"{stats['result_count']} returned)"
                )
        finally:
            cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--docs", type=int, default=10_000)
    args = ap.parse_args()
    bench_parse_plan(200 if args.quick else 1000)
    bench_cluster(args.docs if not args.quick else min(args.docs, 2000), 30 if args.quick else 100)


if __name__ == "__main__":
    main()
