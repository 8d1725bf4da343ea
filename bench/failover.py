"""Failover: how long after `kill -9` of one shard every key is writable again, and how long the
shard then takes to come back into the in-sync set.

A real local cluster (`themis up --shards 3 --no-llm`, RAID1, default settings: `w=all`, the
plan authority restarting dead shards). For each round it writes every key, kills one shard
(each in turn), then keeps writing every key through the survivors until all succeed; it
checks that no acknowledged write was lost (each key read back at its acknowledged version)
and waits for the killed shard to be restarted, caught up and back in sync. Prints one row per
kill. The issue's target: writable within 10 s, aim 5.

    .venv/bin/python bench/failover.py [--rounds 3] [--keys 60] [--base-port 9600]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

import httpx
from _local import api_headers, themis


def put(client: httpx.Client, url: str, key: str, value: int) -> int | None:
    try:
        r = client.put(f"{url}/v1/collections/bench/documents/{key}", json={"value": value})
    except httpx.HTTPError:
        return None
    return r.json()["version"] if r.status_code == 200 else None


def in_sync(cwd: Path) -> bool:
    plan = json.loads((cwd / ".themis" / "plan.json").read_text())
    return not plan.get("out_of_sync") and not plan.get("rejoining")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keys", type=int, default=60)
    parser.add_argument("--base-port", type=int, default=9600)
    args = parser.parse_args()
    keys = [f"k{i}" for i in range(args.keys)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="themis-failover-") as tmp:
        cwd = Path(tmp)
        themis(cwd, "up", "--shards", "3", "--no-llm", "--base-port", str(args.base_port))
        try:
            state = json.loads((cwd / ".themis" / "cluster.json").read_text())
            urls = {s["shard_id"]: s["url"] for s in state["shards"]}
            with httpx.Client(timeout=15, headers=api_headers(cwd)) as client:
                acked: dict[str, tuple[int, int]] = {}
                deadline = time.monotonic() + 60
                while len(acked) < len(keys) and time.monotonic() < deadline:
                    for k in keys:
                        if k not in acked and (v := put(client, urls["shard-0"], k, 0)) is not None:
                            acked[k] = (v, 0)
                for n in range(args.rounds):
                    victim = f"shard-{n % 3}"
                    survivors = [s for s in urls if s != victim]
                    pid = next(
                        s["pid"]
                        for s in json.loads((cwd / ".themis" / "cluster.json").read_text())["shards"]
                        if s["shard_id"] == victim
                    )
                    os.kill(pid, signal.SIGKILL)
                    killed = time.monotonic()
                    pending, failed = set(keys), 0
                    while pending and time.monotonic() - killed < 120:
                        for k in sorted(pending):
                            v = put(client, urls[survivors[len(pending) % 2]], k, n + 1)
                            if v is None:
                                failed += 1
                            else:
                                acked[k] = (v, n + 1)
                                pending.discard(k)
                    writable = time.monotonic() - killed
                    lost = 0
                    for k, (version, value) in acked.items():
                        r = client.get(f"{urls[survivors[0]]}/v1/collections/bench/documents/{k}")
                        body = r.json() if r.status_code == 200 else {}
                        lost += (body.get("version"), (body.get("document") or {}).get("value")) != (
                            version,
                            value,
                        )
                    while not in_sync(cwd) and time.monotonic() - killed < 300:
                        time.sleep(0.2)
                    back = time.monotonic() - killed
                    rows.append((victim, writable, failed, len(pending), lost, back))
        finally:
            themis(cwd, "down")
    print(f"\nfailover after kill -9 (3 shards, RAID1, w=all, {args.keys} keys)")
    head = ("killed", "all keys writable s", "503s meanwhile", "never", "lost", "back in sync s")
    print(f"{head[0]:<8} {head[1]:>20} {head[2]:>15} {head[3]:>6} {head[4]:>5} {head[5]:>15}")
    for victim, writable, failed, never, lost, back in rows:
        print(f"{victim:<8} {writable:>20.1f} {failed:>15} {never:>6} {lost:>5} {back:>15.1f}")
    return 0 if all(r[3] == 0 and r[4] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
