"""Batch API benchmark: what a running batch costs interactive requests, on one real shard.

Interactive chat requests (sequential, ``max_tokens`` small) are timed alone, then while a
Batch API batch runs on the same shard (its lines at the engine's lowest priority, at most
``THEMIS_BATCH_CONCURRENCY`` in flight), then while the same lines are sent directly to
``/v1/chat/completions`` all at once at the default priority (what a client without the Batch
API would do). The table gives the interactive latency in each case and how long the background
work took. Everything goes through the official ``openai`` client.

Defaults are small so that a run takes a few minutes on 2 cores.

Run: `.venv/bin/python bench/batch_api.py [--interactive 8] [--lines 24] [--tokens 32]`
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import openai
from _local import themis
from themis_core.plan import ClusterPlan

ENDED = ("completed", "failed", "expired", "cancelled")


def interactive(client: openai.OpenAI, n: int, tokens: int) -> list[float]:
    """Latency (ms) of ``n`` sequential chat requests."""
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        client.chat.completions.create(
            messages=[{"role": "user", "content": f"Say hello number {i}"}],
            model="gemma3-270m",
            max_tokens=tokens,
            temperature=0,
        )
        out.append((time.perf_counter() - t0) * 1000)
    return out


def line_bodies(n: int, tokens: int) -> list[dict]:
    return [
        {"messages": [{"role": "user", "content": f"Write a short story, part {i}"}], "max_tokens": tokens}
        for i in range(n)
    ]


def run_batch(client: openai.OpenAI, bodies: list[dict]) -> float:
    lines = [
        {"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions", "body": b}
        for i, b in enumerate(bodies)
    ]
    data = "\n".join(json.dumps(x) for x in lines).encode()
    t0 = time.perf_counter()
    file = client.files.create(file=("bench.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    while batch.status not in ENDED:
        time.sleep(0.2)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed", batch
    return time.perf_counter() - t0


def run_direct(client: openai.OpenAI, bodies: list[dict]) -> float:
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=lambda b=b: client.chat.completions.create(model="gemma3-270m", **b))
        for b in bodies
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def under(client: openai.OpenAI, background, n: int, tokens: int) -> tuple[list[float], float]:
    """Interactive latencies while ``background()`` runs, and the background's wall time."""
    took: list[float] = []
    worker = threading.Thread(target=lambda: took.append(background()))
    worker.start()
    time.sleep(1.0)  # the background work is under way
    latencies = interactive(client, n, tokens)
    worker.join()
    return latencies, took[0]


def p(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interactive", type=int, default=8, help="interactive requests per case")
    ap.add_argument("--itokens", type=int, default=8, help="max_tokens of an interactive request")
    ap.add_argument("--lines", type=int, default=24, help="background requests (batch lines)")
    ap.add_argument("--tokens", type=int, default=32, help="max_tokens of a background request")
    args = ap.parse_args()
    bodies = line_bodies(args.lines, args.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        themis(cwd, "up", "--shards", "1", "--base-port", "0", "--raid-mode", "raid0")
        try:
            url = ClusterPlan.load(cwd / ".themis" / "plan.json").members[0].url
            with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=600, max_retries=0) as client:
                interactive(client, 2, args.itokens)  # warm up
                rows = [("alone", interactive(client, args.interactive, args.itokens), None)]
                lat, took = under(client, lambda: run_batch(client, bodies), args.interactive, args.itokens)
                rows.append(("during a batch", lat, took))
                lat, took = under(client, lambda: run_direct(client, bodies), args.interactive, args.itokens)
                rows.append(("during direct calls", lat, took))
            print(
                f"\nInteractive chat ({args.interactive} sequential, max_tokens {args.itokens}) vs "
                f"{args.lines} background requests (max_tokens {args.tokens})"
            )
            print(f"{'case':<22} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'background s':>13}")
            for label, lat, took in rows:
                bg = f"{took:.1f}" if took is not None else "-"
                print(f"{label:<22} {p(lat, 50):>8.0f} {p(lat, 95):>8.0f} {max(lat):>8.0f} {bg:>13}")
        finally:
            themis(cwd, "down")


if __name__ == "__main__":
    main()
