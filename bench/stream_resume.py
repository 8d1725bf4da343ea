"""Stream resumption: what a client of a routed stream sees when the generating shard is killed.

A real local cluster (`themis up --shards 3`, the bundled model, the plan authority restarting
dead shards). Each round streams one greedy `/v1/infer` request (domain nobody serves: routed to
the prompt's ring owner) through a shard that is not the generating one, kills the generating
shard (`kill -9`, named by `X-Themis-Shard`) after `sent` tokens, and measures the client's
longest gap between tokens after the kill (the stall at the seam: noticing the loss, the
continuation's prefill and one decode step per token already sent) against the median gap of
the uninterrupted run, and whether the text equals the uninterrupted run's. Prints one row per
round. Gossip suspicion is slowed (as in the e2e test) so a busy shard is not passed over and
both runs go to the same shard.

    .venv/bin/python bench/stream_resume.py [--sent 10 40 80] [--max-tokens 120] [--base-port 9650]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from _local import api_headers, themis

PROMPT = "Write a long story about a lighthouse keeper and the sea. Once upon a time,"


def shards(cwd: Path) -> dict[str, dict]:
    return {s["shard_id"]: s for s in json.loads((cwd / ".themis" / "cluster.json").read_text())["shards"]}


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def stream(client: httpx.Client, url: str, body: dict, kill_after: int | None, cwd: Path):
    """(generating shard, text, token arrival times, index of the first token after the kill)."""
    tokens, times, seam = [], [], None
    with client.stream("POST", f"{url}/v1/infer", json=body) as r:
        shard = r.headers["X-Themis-Shard"]
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            frame = json.loads(line[5:])
            if "token" in frame:
                tokens.append(frame["token"])
                times.append(time.monotonic())
                if kill_after is not None and len(tokens) == kill_after:
                    os.kill(shards(cwd)[shard]["pid"], signal.SIGKILL)
                    seam = len(tokens)
    return shard, "".join(tokens), times, seam


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sent", type=int, nargs="+", default=[10, 40, 80])
    parser.add_argument("--max-tokens", type=int, default=120)
    parser.add_argument("--base-port", type=int, default=9650)
    args = parser.parse_args()
    os.environ.setdefault("THEMIS_CLUSTER_SUSPECT_TIMEOUT_S", "120")  # inherited by the shards
    os.environ.setdefault("THEMIS_CLUSTER_DEAD_TIMEOUT_S", "240")
    body = {"prompt": PROMPT, "domain": "bench-nobody", "max_tokens": args.max_tokens, "temperature": 0}
    body["stream"] = True
    rows = []
    with tempfile.TemporaryDirectory(prefix="themis-resume-") as tmp:
        cwd = Path(tmp)
        themis(cwd, "up", "--shards", "3", "--base-port", str(args.base_port))
        try:
            urls = {sid: s["url"] for sid, s in shards(cwd).items()}
            with httpx.Client(timeout=300, headers=api_headers(cwd)) as client:
                for sent in args.sent:
                    deadline = time.monotonic() + 300  # the authority restarted the last victim
                    while not all(ready(u) for u in urls.values()) and time.monotonic() < deadline:
                        time.sleep(0.5)
                    generator, reference, ref_times, _ = stream(client, urls["shard-0"], body, None, cwd)
                    entry = next(s for s in urls if s != generator)
                    shard, text, times, seam = stream(client, urls[entry], body, sent, cwd)
                    gaps = [b - a for a, b in itertools.pairwise(ref_times)]
                    after = times[seam - 1 :] if seam else []
                    seam_gap = max((b - a for a, b in itertools.pairwise(after)), default=float("nan"))
                    rows.append(
                        (sent, shard, statistics.median(gaps) * 1000, seam_gap * 1000, text == reference)
                    )
        finally:
            themis(cwd, "down")
    print(
        f"\nrouted greedy stream, generating shard killed after `sent` tokens (max_tokens {args.max_tokens})"
    )
    head = ("sent", "killed", "median gap ms", "stall at seam ms", "text = uninterrupted")
    print(f"{head[0]:>5} {head[1]:>8} {head[2]:>14} {head[3]:>17} {head[4]:>21}")
    for sent, shard, median, seam_ms, same in rows:
        print(f"{sent:>5} {shard:>8} {median:>14.1f} {seam_ms:>17.1f} {'yes' if same else 'NO':>21}")
    return 0 if all(r[4] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
