"""Scatter-gather batch benchmark (paper §IV-B, Phase 3): one batch of prompts, three ways, one run.

(a) one shard, requests one after another (the paper's baseline);
(b) one shard, the whole batch into its continuous-batching engine (`/v1/infer:batch`);
(c) a 4-shard cluster, the batch scatter-gathered across the shards.

All shard processes share this machine's cores, so (c)/(b) measures the fan-out overhead, not
added compute; on N machines (c) would add N× the compute. Output length is reduced from the
paper's L̄ = 200 to keep the run short (set --tokens).

Run: `.venv/bin/python bench/batch.py [--batch 64] [--tokens 32]`
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _local import api_headers, themis
from themis_client import InferResult, ThemisClient
from themis_core.plan import ClusterPlan

PROMPTS = [
    "Write a list of fruits:",
    "The history of Rome began",
    "Explain photosynthesis:",
    "Once upon a time,",
    "The best way to learn is",
    "Numbers: 1, 2, 3,",
    "Dear customer,",
    "In the contract, the parties",
]


def requests(n: int, tokens: int) -> list[dict]:
    return [
        {"prompt": f"{PROMPTS[i % len(PROMPTS)]} ({i})", "max_tokens": tokens, "temperature": 0}
        for i in range(n)
    ]


def run(cluster_shards: int, mode: str, batch: list[dict]) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        themis(
            cwd,
            "up",
            "--shards",
            str(cluster_shards),
            "--base-port",
            "0",
            "--raid-mode",
            "raid0" if cluster_shards < 2 else "raid1",
        )
        try:
            url = ClusterPlan.load(cwd / ".themis" / "plan.json").members[0].url
            with ThemisClient(url, timeout=1800, headers=api_headers(cwd)) as client:
                client.infer("warm up", max_tokens=2)
                started = time.perf_counter()
                if mode == "serial":
                    tokens = sum(client.infer(**r).tokens or 0 for r in batch)
                else:
                    results = client.infer_batch(batch, timeout_s=600).results
                    tokens = sum(r.tokens or 0 for r in results if isinstance(r, InferResult))
                return time.perf_counter() - started, tokens
        finally:
            themis(cwd, "down")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    batch = requests(args.batch, args.tokens)
    rows = {
        "(a) 1 shard, serial": run(1, "serial", batch),
        "(b) 1 shard, whole batch in its engine": run(1, "batch", batch),
        "(c) 4 shards, scatter-gather": run(4, "batch", batch),
    }
    print(f"\n| batch of {args.batch}, max {args.tokens} tokens each | wall s | tokens | tokens/s |")
    print("|---|---:|---:|---:|")
    for name, (wall, tokens) in rows.items():
        print(f"| {name} | {wall:.1f} | {tokens} | {tokens / wall:.1f} |")
    rate = {k: v[1] / v[0] for k, v in rows.items()}
    a, b, c = rate.values()
    print(
        f"\n(c)/(a) = {c / a:.2f}×, (c)/(b) = {c / b:.2f}× (tokens/s; all shards share this machine's cores)"
    )


if __name__ == "__main__":
    main()
