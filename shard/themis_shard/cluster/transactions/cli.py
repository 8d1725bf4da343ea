"""``themis txn list|resolve`` against the local cluster in ``.themis/cluster.json``.

Both ask the first shard that answers (any shard asks all the others): ``list`` prints every
transaction in doubt, running or still re-sending its commit (``GET /v1/cluster/transactions``);
``resolve ID`` settles one now (``POST /v1/cluster/transactions/{id}:resolve``). Exit status 1
when no shard answered, some shard did not answer the listing, or the transaction is not settled.
"""

from __future__ import annotations

import argparse
import json
import ssl
from pathlib import Path

import httpx
from themis_core.api_keys import bearer_headers


def _urls(args: argparse.Namespace) -> tuple[list[str], object]:
    if args.url:
        return [args.url], True
    path = Path(args.state_dir) / "cluster.json"
    if not path.exists():
        raise SystemExit("no local cluster is running (themis up first)")
    state = json.loads(path.read_text())
    verify = ssl.create_default_context(cafile=state["ca"]) if state.get("ca") else True
    return [s["url"] for s in state["shards"]], verify


def _ask(args: argparse.Namespace, method: str, path: str) -> tuple[int, dict]:
    """The first shard's answer that is not a connection failure."""
    urls, verify = _urls(args)
    errors = []
    with httpx.Client(timeout=args.timeout, verify=verify, headers=bearer_headers(args.api_key)) as client:
        for url in urls:
            try:
                r = client.request(method, f"{url}{path}")
            except httpx.HTTPError as exc:
                errors.append(f"{url}: {exc or type(exc).__name__}")
                continue
            try:
                return r.status_code, r.json()
            except ValueError:
                return r.status_code, {"error": {"code": "bad_response", "message": r.text[:200]}}
    raise SystemExit("no shard answered: " + "; ".join(errors))


def row_line(t: dict) -> str:
    held = ", ".join(f"{h['shard']}({h['role']})" for h in t["held_by"]) or "-"
    keys = ", ".join(t["keys"][:4]) + (f" +{len(t['keys']) - 4}" if len(t["keys"]) > 4 else "")
    return (
        f"{t['id']}  {t['state']:<10} {t['age_s']:7.1f}s  coordinator {t['coordinator'] or '?'}  "
        f"held by {held}  keys {keys or '-'}  attempt {t.get('attempt') or t['id']}"
    )


def list_txns(args: argparse.Namespace) -> int:
    status, body = _ask(args, "GET", "/v1/cluster/transactions")
    if status != 200:
        print(f"error {status}: {body.get('error', {}).get('message', body)}")
        return 1
    if args.json:
        print(json.dumps(body))
    else:
        for t in body["transactions"]:
            print(row_line(t))
        if not body["transactions"]:
            print("no transaction in doubt")
        print(f"(in doubt settles within {body['in_doubt_bound_s']:.0f} s of its prepare)")
        if body["unanswered"]:
            print(f"did not answer: {', '.join(body['unanswered'])}")
    return 1 if body["unanswered"] else 0


def resolve(args: argparse.Namespace) -> int:
    status, body = _ask(args, "POST", f"/v1/cluster/transactions/{args.id}:resolve")
    if status != 200:
        print(f"error {status}: {body.get('error', {}).get('message', body)}")
        return 1
    print(json.dumps(body) if args.json else f"{body['id']} {body['outcome']}: {body['message']}")
    return 0 if body["outcome"] in ("committed", "aborted") else 1


def add_txn_commands(subparsers) -> None:
    """Register ``themis txn ...`` on the top-level parser's subparsers."""
    p = subparsers.add_parser("txn", help="cross-shard transactions: list those in doubt, resolve one")
    sub = p.add_subparsers(dest="txn_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--url", default=None, help="a shard's URL (default: the local cluster's shards)")
        q.add_argument("--timeout", type=float, default=60.0)
        q.add_argument("--json", action="store_true", help="the API's answer as JSON")

    q = sub.add_parser("list", help="transactions in doubt, running, or re-sending their commit")
    common(q)
    q.set_defaults(func=list_txns)
    q = sub.add_parser("resolve", help="settle one transaction now (commit if decided, else abort)")
    common(q)
    q.add_argument("id")
    q.set_defaults(func=resolve)
