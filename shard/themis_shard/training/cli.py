"""``themis adapters federate NAME --domain D --collection C`` against the local cluster.

One call to ``POST /v1/adapters/{name}:federate`` on one shard (the aggregator; default the
first), which runs the rounds over its peers; prints one line per round (or the JSON answer).
Exit status 1 when the shard refused or the round failed.
"""

from __future__ import annotations

import argparse
import json
import ssl
from pathlib import Path

import httpx
from themis_core.api_keys import bearer_headers


def round_line(r: dict) -> str:
    """One round of the answer as a line: samples per shard and what each measured after loading."""
    trained = ", ".join(f"{u['shard_id']}:{u['samples']}" for u in r["updates"])
    evals = ", ".join(
        f"{p['shard_id']} α={p['accuracy_delta']:+.4f}"
        if p.get("accuracy_delta") is not None
        else f"{p['shard_id']} α=?"
        for p in r["published"]
    )
    return f"round {r['round']}: {r['training_samples']} samples ({trained}); {evals}"


def federate(args: argparse.Namespace) -> int:
    path = Path(args.state_dir) / "cluster.json"
    if not path.exists() and not args.url:
        raise SystemExit("no local cluster is running (themis up first)")
    state = json.loads(path.read_text()) if path.exists() else {}
    verify = ssl.create_default_context(cafile=state["ca"]) if state.get("ca") else True
    shards = {s["shard_id"]: s["url"] for s in state.get("shards", [])}
    if args.url:
        url = args.url
    elif args.aggregator:
        if args.aggregator not in shards:
            raise SystemExit(f"no such shard: {args.aggregator}")
        url = shards[args.aggregator]
    else:
        url = next(iter(shards.values()))
    body = {
        "domain": args.domain,
        "collection": args.collection,
        "text_field": args.text_field,
        "rounds": args.rounds,
        "local_steps": args.local_steps,
        "max_tokens": args.max_tokens,
    }
    if args.participants:
        body["participants"] = args.participants
    with httpx.Client(timeout=args.timeout, verify=verify, headers=bearer_headers(args.api_key)) as client:
        try:
            r = client.post(f"{url}/v1/adapters/{args.name}:federate", json=body)
        except httpx.HTTPError as exc:
            print(f"unreachable: {exc}")
            return 1
    answer = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    if args.json:
        print(json.dumps({"status": r.status_code, **answer}))
    elif r.status_code == 200:
        for rnd in answer["rounds"]:
            print(round_line(rnd))
    else:
        err = answer.get("error", {})
        print(f"refused ({r.status_code} {err.get('code', '')}): {err.get('message', r.text[:200])}")
    return 0 if r.status_code == 200 else 1


def add_adapter_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("adapters", help="LoRA adapters of the local cluster")
    asub = p.add_subparsers(dest="adapters_command", required=True)
    f = asub.add_parser(
        "federate", help="federated LoRA rounds (FedAvg) for a domain over the shards holding its documents"
    )
    f.add_argument("name", help="the adapter's name")
    f.add_argument("--domain", required=True)
    f.add_argument("--collection", required=True)
    f.add_argument("--text-field", default="text")
    f.add_argument("--rounds", type=int, default=1)
    f.add_argument("--local-steps", type=int, default=10, help="E: steps each shard trains per round")
    f.add_argument("--max-tokens", type=int, default=48, help="tokens per document trained on")
    f.add_argument("--participants", nargs="+", default=None, help="shard ids (default: every member)")
    f.add_argument("--aggregator", default=None, help="the shard that averages (default: the first)")
    f.add_argument("--url", default=None, help="the aggregator's URL (overrides --aggregator)")
    f.add_argument("--timeout", type=float, default=3600.0)
    f.add_argument("--json", action="store_true", help="print the answer as JSON")
    f.set_defaults(func=federate)
