"""Forwarding overhead on a real 2-shard cluster (paper §VI-A, Table II): what one extra hop
costs compared with serving locally, for documents and for data-local EMBED.

* document GET on the key's owner (local) vs through the other shard (forwarded);
* EMBED by URN through a shard that does not hold the documents (routed to the owner) vs
  embedding the same texts directly on the owner (target: ≤ 5 % overhead; paper ≤ 10 %).

Run: `.venv/bin/python bench/forwarding.py [--n 300]`
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from _local import api_headers, themis
from themis_client import ThemisClient
from themis_core.plan import ClusterPlan
from themis_shard.cluster.placement.owners import Topology


def timed(call, *args, **kw) -> float:
    t = time.perf_counter()
    call(*args, **kw)
    return (time.perf_counter() - t) * 1000


def pcts(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=100)
    return q[49], q[98]


def measure(n: int, embed_pairs: int = 60) -> dict[str, list[float]]:
    """Per-call milliseconds, interleaved on one 2-shard cluster: document GETs on the owner and
    through the other shard; ``embed_pairs`` EMBEDs of 8 texts on the owner and of their 8 URNs
    through the other (which goes first alternates, so neither always meets a warmer machine)."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        # raid0: one owner per key, so "the other shard" never holds a copy.
        themis(cwd, "up", "--shards", "2", "--raid-mode", "raid0", "--base-port", "0")
        try:
            plan = ClusterPlan.load(cwd / ".themis" / "plan.json")
            topo = Topology.of(plan, "shard-0")
            url = {m.shard_id: m.url for m in plan.members}
            keys = [f"k{i}" for i in range(4 * n)]
            owned = [k for k in keys if topo.owners("b", k)[0] == "shard-0"][:n]
            with (
                ThemisClient(url["shard-0"], timeout=60, headers=api_headers(cwd)) as owner,
                ThemisClient(url["shard-1"], timeout=60, headers=api_headers(cwd)) as other,
            ):
                for k in owned:
                    owner.put("b", k, {"text": f"document {k} about a contract"})
                local, forwarded = [], []
                for k in owned:  # interleaved, so both see the same machine load
                    local.append(timed(owner.get, "b", k))
                    forwarded.append(timed(other.get, "b", k))
                groups = [owned[i : i + 8] for i in range(0, len(owned) - 7, 8)]
                direct, routed = [], []
                for i in range(embed_pairs):
                    group = groups[i % len(groups)]
                    calls = [
                        (direct, lambda g=group: owner.embed([f"document {k} about a contract" for k in g])),
                        (routed, lambda g=group: other.embed(urns=[f"urn:themis:b:{k}" for k in g])),
                    ]
                    for into, call in calls if i % 2 else calls[::-1]:
                        into.append(timed(call))
        finally:
            themis(cwd, "down")
    return {"local": local, "forwarded": forwarded, "direct": direct, "routed": routed}


def embed_overhead(m: dict[str, list[float]]) -> float:
    """Data-local EMBED through a non-owner against embedding on the owner, as a fraction."""
    d, r = statistics.median(m["direct"]), statistics.median(m["routed"])
    return (r - d) / d


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--embed-pairs", type=int, default=60, help="EMBED calls of 8 documents, each way")
    args = parser.parse_args()
    m = measure(args.n, args.embed_pairs)
    lp, lq = pcts(m["local"])
    fp, fq = pcts(m["forwarded"])
    print("\n| path | p50 ms | p99 ms |\n|---|---:|---:|")
    print(f"| document GET on the owner (local) | {lp:.2f} | {lq:.2f} |")
    print(f"| document GET through the other shard (1 hop) | {fp:.2f} | {fq:.2f} |")
    print(f"| forwarding overhead | {fp - lp:.2f} | {fq - lq:.2f} |")
    d = statistics.median(m["direct"])
    r = statistics.median(m["routed"])
    print(f"\n| EMBED of 8 documents | median ms |\n|---|---:|\n| texts on the owner | {d:.1f} |")
    overhead = 100 * embed_overhead(m)
    print(f"| URNs through a non-owner (data-local) | {r:.1f} |\n| overhead | {overhead:+.1f} % |")


if __name__ == "__main__":
    main()
