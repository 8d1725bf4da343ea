"""Resharding benchmark: migration throughput and foreground latency while a cluster grows.

Starts a real local cluster (`themis up --shards 3 --no-llm`), loads N documents, then measures
GET p50/p99 through the cluster while idle, scales to 4 shards (`themis scale`) while the same
reader runs, and reports keys/s and MB/s of the handoff plus the foreground p99 during it.

Run: `.venv/bin/python bench/reshard.py [--docs 100000]` (takes a few minutes at 100k).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from _local import themis
from themis_client import ThemisClient
from themis_core.plan import ClusterPlan


def load(url: str, n: int) -> None:
    with ThemisClient(url, timeout=60) as client:
        for start in range(0, n, 1000):
            client.batch(
                "bench", {f"d{i}": {"i": i, "body": "x" * 200} for i in range(start, min(start + 1000, n))}
            )


def reader(urls: list[str], n: int, stop: threading.Event, out: list[float]) -> None:
    clients = [ThemisClient(u, timeout=30) for u in urls]  # one per shard: reads spread at random
    try:
        while not stop.is_set():
            t = time.perf_counter()
            random.choice(clients).get("bench", f"d{random.randrange(n)}")
            out.append(time.perf_counter() - t)
    finally:
        for c in clients:
            c.close()


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) > 2 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        themis(cwd, "up", "--shards", "3", "--no-llm", "--base-port", "0")
        try:
            plan = ClusterPlan.load(cwd / ".themis" / "plan.json")
            urls = [m.url for m in plan.members]
            load(urls[0], args.docs)
            idle: list[float] = []
            stop = threading.Event()
            t = threading.Thread(target=reader, args=(urls, args.docs, stop, idle))
            t.start()
            time.sleep(5)
            stop.set()
            t.join()
            during: list[float] = []
            stop = threading.Event()
            t = threading.Thread(target=reader, args=(urls, args.docs, stop, during))
            t.start()
            started = time.perf_counter()
            themis(cwd, "scale", "--shards", "4")
            elapsed = time.perf_counter() - started
            stop.set()
            t.join()
            grown = ClusterPlan.load(cwd / ".themis" / "plan.json")
            keys = moved_bytes = 0
            for m in grown.members:
                with ThemisClient(m.url) as c:
                    mig = c.cluster_status().migration
                keys += mig["keys_received"]
                moved_bytes += mig["bytes_received"]
        finally:
            themis(cwd, "down")
    print(f"\n| resharding 3 → 4 shards, {args.docs:,} docs (RAID1, 2 copies) | value |\n|---|---:|")
    print(f"| keys moved | {keys:,} ({keys / (2 * args.docs):.1%} of copies; expected ≈ 2/4 · ¼ per copy) |")
    print(f"| scale wall time (new shard start + handoff + purge) | {elapsed:.1f} s |")
    print(f"| migration throughput | {keys / elapsed:,.0f} keys/s, {moved_bytes / elapsed / 1e6:.2f} MB/s |")
    print(f"| foreground GET p50 / p99, idle | {pct(idle, 50):.1f} / {pct(idle, 99):.1f} ms |")
    print(
        f"| foreground GET p50 / p99, during migration | {pct(during, 50):.1f} / {pct(during, 99):.1f} ms |"
    )


if __name__ == "__main__":
    main()
