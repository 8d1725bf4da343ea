"""Document history benchmark: what keeping superseded versions costs a write. Overwrites of
existing documents (the case that writes a history record and compacts) in batches and as single
synced puts, with ``history_versions`` 0 (off), 1 and 8 (the default), on a real RocksDB store;
then reading a superseded version (``get_version``) against reading the current one (``get``).

Run: `.venv/bin/python bench/history.py [--keys 2000] [--rounds 5] [--single 500]`.
Prints one table; numbers are from this machine in this run (shared, noisy: compare rows).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from themis_shard.storage.documents import DocumentStore, Write

DOC = {"text": "x" * 200}


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}/s"


def bench(path: Path, history_versions: int, keys: int, rounds: int, single: int) -> list[str]:
    store = DocumentStore(path, history_versions=history_versions)
    names = [f"k{i}" for i in range(keys)]
    store.commit([Write("b", k, DOC) for k in names])
    started = time.perf_counter()
    for r in range(rounds):
        store.commit([Write("b", k, {**DOC, "r": r}) for k in names])
    batch = rate(keys * rounds, time.perf_counter() - started)
    started = time.perf_counter()
    for i in range(single):
        store.put("b", names[i % keys], {**DOC, "s": i})
    puts = rate(single, time.perf_counter() - started)
    started = time.perf_counter()
    for k in names:
        store.get("b", k)
    current = rate(keys, time.perf_counter() - started)
    old = "-"
    if history_versions:
        started = time.perf_counter()
        for k in names:
            doc = store.get("b", k)
            assert store.get_version("b", k, doc.version - 1) is not None
        old = rate(keys, time.perf_counter() - started)
    store.close()
    return [str(history_versions), batch, puts, current, old]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--single", type=int, default=500)
    args = parser.parse_args()
    header = ["history_versions", "batch overwrites", "synced single puts", "get current", "get v-1"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (0, 1, 8):
            rows.append(bench(Path(tmp) / f"h{n}", n, args.keys, args.rounds, args.single))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


if __name__ == "__main__":
    main()
