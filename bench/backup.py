"""Backup and restore throughput: a real local cluster, N documents with 384-d vectors.

Starts `themis up --shards 3 --no-llm`, loads N documents (a 384-d embedding each, a flat index),
times `themis backup create --to DIR` (the cut, then every checkpoint file copied and hashed),
destroys the cluster and times `themis up --shards 2 --restore-from DIR/ID` until every shard is
ready: the CLI checks the backup, then each shard checks and stages it, bulk-loads the keys it
owns in the new ring (``restored.json`` records how long that took: "each shard's restore"),
rebuilds its vector index, and — as at every start of a clustered shard — catches up from its
peers before it reports ready. Next to it: the same `themis up --shards 2` into an empty data
root. MB are the backup's bytes (RocksDB checkpoints of every copy, RAID1: two); docs/s counts
the N documents.

Run: `.venv/bin/python bench/backup.py [--docs 100000] [--restore-shards 2]`.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from _local import themis
from themis_client import ThemisClient, Unavailable

DIM = 384


def load(url: str, n: int, batch: int = 500) -> None:
    rng = random.Random(0)
    with ThemisClient(url, timeout=300) as client:
        client.declare_collection("bench", dimension=DIM, index="flat")
        for start in range(0, n, batch):
            docs = {
                f"d{i}": {"i": i, "title": f"document {i}", "embedding": [rng.random() for _ in range(DIM)]}
                for i in range(start, min(start + batch, n))
            }
            for attempt in range(5):  # an overloaded machine: a replica that timed out wrote nothing
                try:
                    client.batch("bench", docs)
                    break
                except Unavailable:
                    if attempt == 4:
                        raise
                    time.sleep(2)


def shard_urls(cwd: Path) -> list[tuple[str, str]]:
    """(shard id, url) of the local cluster in ``cwd``."""
    state = json.loads(themis(cwd, "status", "--json"))
    return [(s["shard_id"], s["url"]) for s in state["shards"]]


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--restore-shards", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src, dst, empty = Path(tmp) / "src", Path(tmp) / "dst", Path(tmp) / "empty"
        for d in (src, dst, empty):
            d.mkdir()
        themis(src, "up", "--shards", "3", "--no-llm", "--base-port", "0", "--timeout", "3600")
        try:
            load_s, _ = timed(lambda: load(shard_urls(src)[0][1], args.docs))
            held = []  # what each source shard holds (copies included), for the restored counts
            for shard_id, url in shard_urls(src):
                with ThemisClient(url, timeout=60) as db:
                    held.append(f"{shard_id} {db.collection('bench').documents}")
            backup_s, out = timed(lambda: themis(src, "backup", "create", "--to", str(Path(tmp) / "backups")))
            backup_id = str(out).strip().splitlines()[-1]
        finally:
            themis(src, "down")
        shutil.rmtree(src / "data")
        listed = json.loads(themis(src, "backup", "list", "--to", str(Path(tmp) / "backups"), "--json"))
        size = next(b["bytes"] for b in listed if b["id"] == backup_id)
        n = str(args.restore_shards)
        restore_s, _ = timed(
            lambda: themis(
                dst,
                "up",
                "--shards",
                n,
                "--no-llm",
                "--base-port",
                "0",
                "--timeout",
                "3600",
                "--restore-from",
                f"{Path(tmp) / 'backups'}/{backup_id}",
            )
        )
        markers = [json.loads(m.read_text()) for m in sorted((dst / "data").glob("*/restored.json"))]
        shard_s = max(m["seconds"] for m in markers)
        try:
            restored = []
            for shard_id, url in shard_urls(dst):
                with ThemisClient(url, timeout=60) as db:
                    c = db.collection("bench")
                    restored.append(f"{shard_id} {c.documents} docs / {c.vectors} vectors")
        finally:
            themis(dst, "down")
        start_s, _ = timed(lambda: themis(empty, "up", "--shards", n, "--no-llm", "--base-port", "0"))
        themis(empty, "down")

    mb = size / 1e6
    rows = [
        ("load (batch writes, for scale)", load_s),
        ("backup create → directory", backup_s),
        (f"up --restore-from ({n} shards, until ready)", restore_s),
        ("  in it: each shard's restore (slowest)", shard_s),
        (f"up, empty ({n} shards, until ready)", start_s),
        ("restore net of an empty start-up", max(restore_s - start_s, 1e-9)),
    ]
    print(
        f"\nbackup and restore: {args.docs} documents × {DIM}-d vectors, 3 shards raid1 → {n} shards; "
        f"backup {mb:.1f} MB ({backup_id}); source held: {', '.join(held)}; restored: {', '.join(restored)}"
    )
    print(f"| {'operation':46} | {'seconds':>8} | {'MB/s':>8} | {'docs/s':>9} |")
    print(f"|{'-' * 48}|{'-' * 10}|{'-' * 10}|{'-' * 11}|")
    for name, seconds in rows:
        print(f"| {name:46} | {seconds:8.2f} | {mb / seconds:8.1f} | {args.docs / seconds:9.0f} |")


if __name__ == "__main__":
    main()
