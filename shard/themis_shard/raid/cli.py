"""``themis raid status|verify|rebuild|ingest`` against the local cluster in ``.themis/cluster.json``.

``build_parser`` in ``themis_shard.cli`` calls :func:`add_raid_commands`; every subcommand talks to
the shards' public ``/v1/raid/...`` API and exits non-zero when any shard is degraded, unreachable
or cannot be repaired (so scripts can gate on it).
"""

from __future__ import annotations

import argparse
import json
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from themis_core.api_keys import bearer_headers

from ..cli_progress import RebuildView


def _shards(args: argparse.Namespace) -> tuple[list[dict], object]:
    path = Path(args.state_dir) / "cluster.json"
    if not path.exists():
        raise SystemExit("no local cluster is running (themis up first)")
    state = json.loads(path.read_text())
    verify = ssl.create_default_context(cafile=state["ca"]) if state.get("ca") else True
    shards = [s for s in state["shards"] if not args.shard or s["shard_id"] in args.shard]
    if not shards:
        raise SystemExit(f"no such shard(s): {', '.join(args.shard)}")
    return shards, verify


def _call(client: httpx.Client, method: str, url: str, **kw) -> tuple[int, dict]:
    try:
        r = client.request(method, url, **kw)
    except httpx.HTTPError as exc:
        return 0, {"error": {"code": "unreachable", "message": str(exc) or type(exc).__name__}}
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, {"error": {"code": "bad_response", "message": r.text[:200]}}


def _units(u: dict) -> str:
    if not u:
        return "units ?"
    return (
        f"units {u.get('ok', 0)}/{u.get('expected', 0)} ok, {u.get('missing', 0)} missing, "
        f"{u.get('corrupt', 0)} corrupt"
    )


def status(args: argparse.Namespace) -> int:
    shards, verify = _shards(args)
    bad = 0
    with httpx.Client(timeout=args.timeout, verify=verify, headers=bearer_headers(args.api_key)) as client:
        for s in shards:
            code, body = _call(client, "GET", f"{s['url']}/v1/raid/status")
            if args.json:
                print(json.dumps({"shard_id": s["shard_id"], "status": code, **body}))
                bad += code != 200 or bool(body.get("degraded") or body.get("error"))
                continue
            if code != 200:
                print(f"{s['shard_id']} DOWN {body['error']['message']}")
                bad += 1
                continue
            if not body.get("enabled"):
                print(f"{s['shard_id']} raid off")
                continue
            layout, op, model = body["layout"], body["operation"], body.get("model") or {}
            health = "DEGRADED" if body.get("degraded") else ("ERROR" if body.get("error") else "ok")
            bad += health != "ok"
            print(
                f"{s['shard_id']} {health} {layout.get('mode')} k={layout.get('data_units')} "
                f"m={layout.get('parity_units')} model={model.get('name', '-')} "
                f"{_units(body.get('units'))}; "
                f"last {op['op']} {op['state']} {op['progress']:.0%} "
                f"{op['rate_bytes_per_s'] / 1e6:.1f} MB/s, {op['units_repaired']} repaired"
                + (f" — {body['error']}" if body.get("error") else "")
            )
    return 1 if bad else 0


def verify(args: argparse.Namespace) -> int:
    shards, tls = _shards(args)
    bad = 0
    with httpx.Client(timeout=args.timeout, verify=tls, headers=bearer_headers(args.api_key)) as client:
        for s in shards:
            code, body = _call(client, "POST", f"{s['url']}/v1/raid/verify")
            if args.json:
                print(json.dumps({"shard_id": s["shard_id"], "status": code, **body}))
                bad += code != 200 or bool(body.get("missing") or body.get("corrupt"))
                continue
            if code != 200:
                print(f"{s['shard_id']} FAILED {body['error']['message']}")
                bad += 1
                continue
            broken = body["missing"] + body["corrupt"]
            bad += bool(broken)
            print(
                f"{s['shard_id']} {'ok' if not broken else 'DEGRADED'} {_units(body)}"
                + (f" bad: {' '.join(body['bad_units'][:10])} (repair scheduled)" if broken else "")
            )
    return 1 if bad else 0


def _rebuild_one(client: httpx.Client, shard: dict, args: argparse.Namespace, view: RebuildView):
    """The rebuild POST blocks until the shard is done, so it runs in a thread while this one
    polls the shard's ``/v1/raid/status`` into its progress bar."""
    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(
            _call, client, "POST", f"{shard['url']}/v1/raid/rebuild", json={"assemble": args.assemble}
        )
        while True:
            finished = done.done()
            code, body = _call(client, "GET", f"{shard['url']}/v1/raid/status")
            if code == 200 and body.get("operation", {}).get("op") == "rebuild":
                view.update(shard["shard_id"], body["operation"])
            if finished:
                code, body = done.result()
                if code == 200:
                    view.update(shard["shard_id"], body["operation"])
                return code, body
            time.sleep(args.poll)


def rebuild(args: argparse.Namespace) -> int:
    """One shard after the other (a rebuild reads its peers' units), each with a progress bar."""
    shards, tls = _shards(args)
    bad = 0
    with (
        httpx.Client(timeout=args.timeout, verify=tls, headers=bearer_headers(args.api_key)) as client,
        RebuildView(args.console, [s["shard_id"] for s in shards]) as view,
    ):
        results = [(s, _rebuild_one(client, s, args, view)) for s in shards]
    for s, (code, body) in results:
        if code != 200:
            print(f"{s['shard_id']} FAILED {body['error']['message']}")
            bad += 1
            continue
        op = body["operation"]
        print(
            f"{s['shard_id']} {op['op']} {op['state']}: {op['units_repaired']} unit(s) repaired, "
            f"{op['bytes_transferred'] / 1e6:.1f} MB in {op['elapsed_s']:.2f}s; "
            f"{_units(body['units'])}"
        )
    return 1 if bad else 0


def ingest(args: argparse.Namespace) -> int:
    shards, tls = _shards(args)
    with httpx.Client(timeout=args.timeout, verify=tls, headers=bearer_headers(args.api_key)) as client:
        code, body = _call(
            client,
            "POST",
            f"{shards[0]['url']}/v1/raid/models",
            json={"source": args.source, "activate": args.activate},
        )
    if code != 201:
        print(f"ingest failed: {body['error']['message']}")
        return 1
    print(
        f"ingested {body['name']} ({body['size']} bytes, {body['stripes']} stripes, {body['mode']}) "
        f"key {body['key']}"
    )
    return 0


def add_raid_commands(subparsers) -> None:
    """Register ``themis raid ...`` on the top-level parser's subparsers."""
    p = subparsers.add_parser("raid", help="RAID model-weight storage: status, verify, rebuild, ingest")
    sub = p.add_subparsers(dest="raid_command", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--shard", action="append", default=[], help="only this shard (repeatable)")
        q.add_argument("--timeout", type=float, default=600.0)

    q = sub.add_parser("status", help="layout, units, last operation and its rate per shard")
    common(q)
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=status)
    q = sub.add_parser("verify", help="crc-check every unit on every shard (schedules repairs)")
    common(q)
    q.add_argument("--json", action="store_true", help="one JSON object per shard")
    q.set_defaults(func=verify)
    q = sub.add_parser("rebuild", help="repair missing/corrupt units from the peers' units + parity now")
    common(q)
    q.add_argument("--assemble", action="store_true", help="also reassemble and re-verify the model file")
    q.add_argument("--poll", type=float, default=0.2, help="seconds between progress polls")
    q.set_defaults(func=rebuild)
    q = sub.add_parser("ingest", help="stripe a model (bundled, a path on the first shard, or a URL)")
    common(q)
    q.add_argument("source")
    q.add_argument("--activate", action="store_true", help="shards assemble it at their next start")
    q.set_defaults(func=ingest)
