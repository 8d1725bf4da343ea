"""The paper's H2: routing by gossip-announced adapter capability lowers the domain-mismatch rate
(and so raises quality) compared with routing by topology (the consistent-hash ring) only.

Set-up: a real local 3-shard cluster (``themis up``, raid1) with the model. The shipped training
texts of legal, medical and code go into one collection per domain (spread over the shards by
the ring); each domain gets a real adapter trained by a federated round on one "home" shard only
(shard-0 legal, shard-1 medical, shard-2 code), from the documents that shard holds. Each is
evaluated on its domain's held-out set and announced through gossip.

Workload: the held-out prompts of the three domains, mixed and shuffled, each sent ``--repeat``
times to the shards in turn, without a ``domain`` field.

* gossip routing: as sent; the shard detects the domain and the router picks the shard announcing
  the best adapter for it (``shard_id`` in the answer says where it ran).
* consistent-hash routing: the same prompts with a domain no shard announces, so the router falls
  back to the ring owner of the prompt (``shard_id`` again measured, not computed).

A request is a *mismatch* when the shard it ran on serves no adapter for the prompt's domain.
Quality: the held-out loss of the prompt's reference completion (mean negative log-probability
per completion token, scored with ``/v1/completions`` echo+logprobs) under what the serving shard
applies — its adapter when that adapter is for the prompt's domain (the baseline is granted
this even though it never names the domain), else the base model. Lower is better.

Run: ``.venv/bin/python bench/h2.py [--repeat 2] [--local-steps 8] [--max-tokens 32]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _local import api_headers, themis
from themis_shard.domains.sets import training_texts, validation_set

DOMAINS = ("legal", "medical", "code")
NOBODY = "h2-topology-only"  # a domain no shard announces: the router's consistent-hash fallback


def wait_announced(url: str, headers: dict, names: set[str], timeout: float = 300) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        caps = httpx.get(f"{url}/v1/cluster/status", headers=headers, timeout=10).json()["capabilities"]
        if names <= {c["adapter_id"] for c in caps if c.get("active", True)}:
            return caps
        time.sleep(1)
    raise SystemExit(f"adapters {sorted(names)} were not all announced within {timeout} s")


def completion_loss(url: str, headers: dict, prompt: str, completion: str, adapter: str | None) -> float:
    """Mean −log p per token of ``completion`` after ``prompt`` (teacher forcing, echo)."""
    body = {
        "model": "gemma3-270m",
        "prompt": prompt + completion,
        "echo": True,
        "logprobs": 0,
        "max_tokens": 1,
    }
    if adapter:
        body["adapter"] = adapter
    r = httpx.post(f"{url}/v1/completions", json=body, headers=headers, timeout=120)
    r.raise_for_status()
    lp = r.json()["choices"][0]["logprobs"]
    scored = [
        -x
        for x, off in zip(lp["token_logprobs"], lp["text_offset"], strict=True)
        if x is not None and len(prompt) <= off < len(prompt) + len(completion)
    ]
    return statistics.fmean(scored) if scored else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2, help="times each held-out prompt is sent per policy")
    ap.add_argument("--local-steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32, help="tokens per document trained on")
    ap.add_argument("--learning-rate", type=float, default=0.01)
    ap.add_argument("--base-port", type=int, default=8761)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    # three shards train at once on one machine: one BLAS thread each (oversubscribed OpenBLAS
    # threads spin; the shards inherit this through `themis up`)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="themis-h2-") as tmp:
        cwd = Path(tmp)
        t0 = time.monotonic()
        out = themis(
            cwd,
            "up",
            "--shards",
            "3",
            "--raid-mode",
            "raid1",
            "--base-port",
            str(args.base_port),
            "--thresholds",
            "0.8",
            "0.6",
            "0.0",  # θ3 = 0: "better than the base model on the held-out set" (README)
            "--timeout",
            "600",
        )
        try:
            run(cwd, out, args, t0)
        finally:
            themis(cwd, "down")


def run(cwd: Path, up_out: str, args: argparse.Namespace, t0: float) -> None:
    urls = dict(line.split() for line in up_out.splitlines() if line.strip())
    ids = sorted(urls)
    headers = api_headers(cwd)
    s0 = urls[ids[0]]
    print(f"cluster up in {time.monotonic() - t0:.0f} s: {', '.join(ids)}", file=sys.stderr)
    for d in DOMAINS:
        for i, text in enumerate(training_texts(d)):
            r = httpx.put(
                f"{s0}/v1/collections/{d}/documents/t{i}", json={"text": text}, headers=headers, timeout=60
            )
            r.raise_for_status()

    home = dict(zip(DOMAINS, ids, strict=True))

    def federate(d: str) -> tuple[str, dict]:
        """One round for ``d`` on its home shard only (the three train at once, one per shard)."""
        t = time.monotonic()
        body = {
            "domain": d,
            "collection": d,
            "rounds": 1,
            "local_steps": args.local_steps,
            "batch": args.batch,
            "max_tokens": args.max_tokens,
            "learning_rate": args.learning_rate,
            "participants": [home[d]],
        }
        r = httpx.post(f"{s0}/v1/adapters/{d}-h2:federate", json=body, headers=headers, timeout=7200)
        if r.status_code != 200:
            raise SystemExit(f"federating {d}: {r.status_code} {r.text}")
        (rnd,) = r.json()["rounds"]
        (pub,) = rnd["published"]
        took = time.monotonic() - t
        print(
            f"trained {d}-h2 on {home[d]}: {rnd['training_samples']} texts in {took:.0f} s, "
            f"α {pub['accuracy_delta']}",
            file=sys.stderr,
        )
        return d, {
            "shard": home[d],
            "samples": rnd["training_samples"],
            "alpha": pub["accuracy_delta"],
            "s": took,
        }

    with ThreadPoolExecutor(len(DOMAINS)) as pool:
        trained = dict(pool.map(federate, DOMAINS))
    wait_announced(s0, headers, {f"{d}-h2" for d in DOMAINS})

    # Held-out loss of every item under the base model and under its domain's adapter.
    items = [(d, p, c) for d in DOMAINS for p, c in validation_set(d)]
    base = {(p, c): completion_loss(s0, headers, p, c, None) for _, p, c in items}
    tuned = {(p, c): completion_loss(urls[home[d]], headers, p, c, f"{d}-h2") for d, p, c in items}

    rng = random.Random(args.seed)
    workload = items * args.repeat
    rng.shuffle(workload)
    entries = itertools.cycle(ids)
    rows = []
    for policy, domain in (("gossip (capability)", None), ("consistent hash", NOBODY)):
        served, mismatched, losses, detected_ok, lat = [], 0, [], 0, []
        for d, p, c in workload:
            body = {"prompt": p, "max_tokens": 1, "temperature": 0}
            if domain:
                body["domain"] = domain
            t = time.perf_counter()
            r = httpx.post(f"{urls[next(entries)]}/v1/infer", json=body, headers=headers, timeout=120)
            lat.append(time.perf_counter() - t)
            r.raise_for_status()
            ans = r.json()
            shard = ans["shard_id"]
            served.append(shard)
            detected_ok += ans.get("domain_detected") == d
            match = shard == home[d]
            mismatched += not match
            losses.append(tuned[(p, c)] if match else base[(p, c)])
        n = len(workload)
        rows.append(
            (
                policy,
                n,
                mismatched / n,
                statistics.fmean(losses),
                {s: served.count(s) for s in ids},
                detected_ok / n if domain is None else None,
                statistics.median(lat) * 1000,
            )
        )

    print("| adapter | home shard | trained on (texts) | α on held-out set | federate s |")
    print("|---|---|---|---|---|")
    for d in DOMAINS:
        t = trained[d]
        alpha = t["alpha"] if t["alpha"] is not None else float("nan")
        print(f"| {d}-h2 | {t['shard']} | {t['samples']} | {alpha:+.4f} | {t['s']:.0f} |")
    print()
    print(
        f"held-out loss per completion token over {len(items)} items: base model "
        f"{statistics.fmean(base.values()):.4f}, each domain's adapter {statistics.fmean(tuned.values()):.4f}"
    )
    print()
    print("| routing | requests | domain mismatch | held-out loss | served by | detected right | p50 ms |")
    print("|---|---|---|---|---|---|---|")
    for policy, n, mm, loss, by, det, p50 in rows:
        by_s = " ".join(f"{s}:{k}" for s, k in by.items())
        det_s = f"{det:.0%}" if det is not None else "–"
        print(f"| {policy} | {n} | {mm:.1%} | {loss:.4f} | {by_s} | {det_s} | {p50:.0f} |")
    print()
    print(json.dumps({"args": vars(args), "trained": trained}), file=sys.stderr)


if __name__ == "__main__":
    main()
