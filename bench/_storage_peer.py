"""Themis next to a 3-member etcd, same client, same values, same machine, one run.

A 3-shard RAID1 Themis cluster (no model) and a 3-member etcd (``_etcd``) run side by side;
one load driver (``_load``: pooled ``httpx.AsyncClient``, closed loop) sends ~200-byte values at
1/16/64 clients. Requests go round-robin over the members (what a plain HTTP client does: on
Themis 2 of 3 writes then take one forwarding hop to the key's primary, on etcd a follower
forwards to the leader), and for Themis also token-aware (straight to the key's primary, from
the ring, as ``themis_client.routing`` does). Tables: writes at w=1/majority/all vs etcd put,
reads vs etcd's linearizable and serializable range, 2-key transactions (single-shard and 2PC)
vs etcd txn, each with the Themis/etcd ratio. Writes also show the servers' CPU time per write
(``/proc``, all members together): on a shared machine whose speed drifts, steadier than a rate.
Each etcd put cell runs right before the Themis cells it is compared with.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from _etcd import b64, etcd_cluster, etcd_version
from _load import Op, Result, measure
from _local import api_headers, themis
from themis_client.routing import KeyRouter

DOC = {"title": "A document", "body": "x" * 160, "n": 1}
VALUE = json.dumps(DOC)  # ~200 bytes, the etcd value too
READ_KEYS = 256


def _ok(r: httpx.Response) -> None:
    if r.status_code >= 400:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")


def _etcd_ok(r: httpx.Response) -> None:
    _ok(r)
    if "error" in r.json():
        raise RuntimeError(r.text[:200])


@dataclass
class Themis:
    urls: list[str]
    router: KeyRouter
    headers: dict[str, str]
    pids: list[int]

    def url(self, routing: str, c: int, i: int, collection: str, key: str) -> str:
        if routing == "token-aware":
            return self.router.primary_url(collection, key)
        return self.urls[(c + i) % len(self.urls)]

    def write(self, concern: str, routing: str, run: str) -> Op:
        async def op(http: httpx.AsyncClient, c: int, i: int) -> None:
            key = f"{run}-{c}-{i}"
            base = self.url(routing, c, i, "bench", key)
            _ok(await http.put(f"{base}/v1/collections/bench/documents/{key}?w={concern}", json=DOC))

        return op

    def read(self, routing: str) -> Op:
        async def op(http: httpx.AsyncClient, c: int, i: int) -> None:
            key = f"r{(c * 7919 + i) % READ_KEYS}"
            _ok(
                await http.get(
                    f"{self.url(routing, c, i, 'bench', key)}/v1/collections/bench/documents/{key}"
                )
            )

        return op

    def txn(self, same_primary: bool, routing: str, run: str) -> Op:
        async def op(http: httpx.AsyncClient, c: int, i: int) -> None:
            a = f"{run}-{c}-{i}-a"
            pa = self.router.primary("txn", a)
            b = next(
                k
                for k in (f"{run}-{c}-{i}-b{j}" for j in itertools.count())
                if (self.router.primary("txn", k) == pa) == same_primary
            )
            ops = [{"op": "put", "collection": "txn", "key": k, "document": DOC} for k in (a, b)]
            _ok(
                await http.post(
                    f"{self.url(routing, c, i, 'txn', a)}/v1/transactions", json={"operations": ops}
                )
            )

        return op


@dataclass
class Etcd:
    urls: list[str]
    pids: list[int]

    def put(self, run: str) -> Op:
        async def op(http: httpx.AsyncClient, c: int, i: int) -> None:
            url = self.urls[(c + i) % len(self.urls)]
            _etcd_ok(
                await http.post(f"{url}/v3/kv/put", json={"key": b64(f"{run}-{c}-{i}"), "value": b64(VALUE)})
            )

        return op

    def range(self, serializable: bool) -> Op:
        async def op(http: httpx.AsyncClient, c: int, i: int) -> None:
            url = self.urls[(c + i) % len(self.urls)]
            body = {"key": b64(f"r{(c * 7919 + i) % READ_KEYS}"), "serializable": serializable}
            r = await http.post(f"{url}/v3/kv/range", json=body)
            _etcd_ok(r)
            if not r.json().get("kvs"):
                raise RuntimeError("key not found")

        return op

    def txn(self, run: str) -> Op:
        async def op(http: httpx.AsyncClient, c: int, i: int) -> None:
            url = self.urls[(c + i) % len(self.urls)]
            puts = [
                {"requestPut": {"key": b64(f"{run}-{c}-{i}-{s}"), "value": b64(VALUE)}} for s in ("a", "b")
            ]
            _etcd_ok(await http.post(f"{url}/v3/kv/txn", json={"success": puts}))

        return op


def _preload(themis_: Themis, etcd: Etcd) -> None:
    with httpx.Client(timeout=60, headers=themis_.headers, trust_env=False) as c:
        for j in range(READ_KEYS):
            key = f"r{j}"
            _ok(
                c.put(
                    f"{themis_.router.primary_url('bench', key)}/v1/collections/bench/documents/{key}",
                    json=DOC,
                )
            )
            _etcd_ok(c.post(f"{etcd.urls[0]}/v3/kv/put", json={"key": b64(key), "value": b64(VALUE)}))


def _cell(r: Result) -> str:
    text = f"{r.rate:,.0f}"
    return text + (f" ({r.failed} failed)" if r.failed else "")


def _cpu(r: Result) -> str:
    return f"{r.cpu_ms_per_op:.2f}" if r.cpu_ms_per_op is not None else "n/a"


def _ratio(a: Result, b: Result) -> str:
    return f"{a.rate / b.rate:.2f}" if b.rate else "n/a"


def compare(clients: list[int], seconds: float, print_: Callable[[str], None] = print) -> None:
    """Start both clusters, print the three tables, stop both."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "etcd").mkdir()
        themis(cwd, "up", "--shards", "3", "--raid-mode", "raid1", "--no-llm", "--base-port", "0")
        try:
            with etcd_cluster(cwd / "etcd") as members:
                headers = api_headers(cwd)
                shards = json.loads((cwd / ".themis" / "cluster.json").read_text())["shards"]
                router = KeyRouter.from_cluster(shards[0]["url"], headers)
                pids = [s["pid"] for s in shards]
                t = Themis([router.url(s) for s in router.shards], router, headers, pids)
                e = Etcd(members.urls, members.pids)
                _preload(t, e)
                _tables(t, e, clients, seconds, headers, print_)
        finally:
            themis(cwd, "down")


def _tables(
    t: Themis,
    e: Etcd,
    clients: list[int],
    seconds: float,
    headers: dict[str, str],
    print_: Callable[[str], None],
) -> None:
    errors: list[str] = []

    def m(op: Op, n: int, hdr: dict[str, str] | None = None, pids: list[int] | None = None) -> Result:
        r = measure(op, n, seconds, hdr, pids or [])
        if r.first_error:
            errors.append(r.first_error)
        return r

    run = uuid.uuid4().hex[:6]
    print_(
        f"\nThemis (3 shards, RAID1, no model) vs etcd {etcd_version()} (3 members), "
        f"same client, ~{len(VALUE)}-byte values, {seconds:g} s per cell; ratio = Themis / etcd"
    )
    print_(
        "\n| writes | clients | Themis round-robin /s | Themis token-aware /s | etcd put /s | ratio rr "
        "| ratio token-aware | server CPU ms/write, Themis token-aware | server CPU ms/put, etcd |"
    )
    print_("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in clients:
        for concern in ("1", "majority", "all"):
            # etcd measured next to each pair of Themis cells: this machine's speed drifts
            peer = m(e.put(f"{run}e{concern}{n}"), n, pids=e.pids)
            rr = m(t.write(concern, "round-robin", f"{run}w{concern}rr{n}"), n, headers)
            ta = m(t.write(concern, "token-aware", f"{run}w{concern}ta{n}"), n, headers, t.pids)
            print_(
                f"| w={concern} | {n} | {_cell(rr)} | {_cell(ta)} | {_cell(peer)} | {_ratio(rr, peer)} "
                f"| {_ratio(ta, peer)} | {_cpu(ta)} | {_cpu(peer)} |"
            )
    print_(
        "\n| reads (GET one key) | clients | Themis round-robin /s | Themis token-aware /s "
        "| etcd linearizable range /s | etcd serializable range /s | ratio rr / lin "
        "| ratio token-aware / lin | ratio token-aware / ser |"
    )
    print_("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in clients:
        lin, ser = m(e.range(False), n), m(e.range(True), n)
        rr, ta = m(t.read("round-robin"), n, headers), m(t.read("token-aware"), n, headers)
        print_(
            f"| GET | {n} | {_cell(rr)} | {_cell(ta)} | {_cell(lin)} | {_cell(ser)} | {_ratio(rr, lin)} "
            f"| {_ratio(ta, lin)} | {_ratio(ta, ser)} |"
        )
    print_("\n| 2-key transactions (w=all) | clients | Themis /s | etcd txn /s | ratio |")
    print_("|---|---:|---:|---:|---:|")
    for n in clients:
        peer = m(e.txn(f"{run}x{n}"), n)
        cases = [
            ("single-shard, token-aware", True, "token-aware"),
            ("single-shard, round-robin", True, "round-robin"),
            ("cross-shard (2PC), round-robin", False, "round-robin"),
        ]
        for label, same, routing in cases:
            r = m(t.txn(same, routing, f"{run}t{int(same)}{routing[0]}{n}"), n, headers)
            print_(f"| {label} | {n} | {_cell(r)} | {_cell(peer)} | {_ratio(r, peer)} |")
    if errors:
        print_("\nfirst errors: " + "; ".join(sorted(set(errors))[:5]))
