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
Each etcd put cell runs right before the Themis cells it is compared with. With ``repeats`` > 1
every row's cells run that many times, interleaved (etcd, Themis, Themis, etcd, ...): a cell
prints the median rate, a ratio the median of the ratios of cells measured side by side.
"""

from __future__ import annotations

import itertools
import json
import statistics
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from _etcd import b64, etcd_cluster, etcd_version
from _load import Op, Result, measure
from _local import api_headers, themis
from _sched import POLICY, scheduled_batch
from themis_client.routing import KeyRouter

DOC = {"title": "A document", "body": "x" * 160, "n": 1}
VALUE = json.dumps(DOC)  # ~200 bytes, the etcd value too
READ_KEYS = 256
COPIES = 2  # RAID1


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

    def txn(self, shape: str, routing: str, run: str) -> Op:
        """2-key transactions of one ``shape``: ``same-owners`` (one primary, the same other owner:
        committed in one step), ``split-owners`` (one primary, different other owners: 2PC, see
        transactions/decisions.py) or ``cross`` (two primaries: 2PC)."""
        owners = self.router.owners

        def fits(a: str, b: str) -> bool:
            if shape == "cross":
                return owners("txn", a, 1) != owners("txn", b, 1)
            same_primary = owners("txn", a, 1) == owners("txn", b, 1)
            return same_primary and (owners("txn", a, COPIES) == owners("txn", b, COPIES)) == (
                shape == "same-owners"
            )

        async def op(http: httpx.AsyncClient, c: int, i: int) -> None:
            a = f"{run}-{c}-{i}-a"
            b = next(k for k in (f"{run}-{c}-{i}-b{j}" for j in itertools.count()) if fits(a, k))
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


def _ratio(a: list[Result], b: list[Result]) -> str:
    """The median of the ratios of the cells measured side by side (repeat k of ``a`` with
    repeat k of ``b``): the machine's drift between repeats cancels out of each."""
    pairs = [x.rate / y.rate for x, y in zip(a, b, strict=True) if y.rate]
    return f"{statistics.median(pairs):.2f}" if pairs else "n/a"


def median_of(results: list[Result]) -> Result:
    """The repeat with the median rate (its CPU figure with it); every repeat's failures."""
    ranked = sorted(results, key=lambda r: r.rate)
    mid = ranked[(len(ranked) - 1) // 2]
    first_error = next((r.first_error for r in results if r.first_error), "")
    return Result(mid.done, sum(r.failed for r in results), mid.seconds, first_error, mid.server_cpu_s)


def compare(
    clients: list[int],
    seconds: float,
    print_: Callable[[str], None] = print,
    repeats: int = 1,
    peer_sched: str = "same",
) -> None:
    """Start both clusters, print the three tables, stop both. ``peer_sched``: ``same`` starts
    etcd under the shards' CPU scheduling policy (SCHED_BATCH by default, which speeds etcd up
    as much as it does Themis), ``default`` under the kernel's default, as etcd is packaged."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        (cwd / "etcd").mkdir()
        themis(cwd, "up", "--shards", "3", "--raid-mode", "raid1", "--no-llm", "--base-port", "0")
        try:
            shards = json.loads((cwd / ".themis" / "cluster.json").read_text())["shards"]
            batch = scheduled_batch(shards[0]["pid"])
            etcd_batch = batch and peer_sched == "same"
            with etcd_cluster(cwd / "etcd", batch_scheduling=etcd_batch) as members:
                print_(f"\nCPU scheduling: Themis's shards {POLICY[batch]}, etcd {POLICY[etcd_batch]}")
                headers = api_headers(cwd)
                router = KeyRouter.from_cluster(shards[0]["url"], headers)
                pids = [s["pid"] for s in shards]
                t = Themis([router.url(s) for s in router.shards], router, headers, pids)
                e = Etcd(members.urls, members.pids)
                _preload(t, e)
                _tables(t, e, clients, seconds, headers, print_, repeats)
        finally:
            themis(cwd, "down")


def _tables(
    t: Themis,
    e: Etcd,
    clients: list[int],
    seconds: float,
    headers: dict[str, str],
    print_: Callable[[str], None],
    repeats: int,
) -> None:
    errors: list[str] = []

    def m(op: Op, n: int, hdr: dict[str, str] | None = None, pids: list[int] | None = None) -> Result:
        r = measure(op, n, seconds, hdr, pids or [])
        if r.first_error:
            errors.append(r.first_error)
        return r

    def row(*cells: Callable[[int], Result]) -> list[list[Result]]:
        """Each cell ``repeats`` times, interleaved (repeat k of every cell before k + 1)."""
        out: list[list[Result]] = [[] for _ in cells]
        for k in range(repeats):
            for results, cell in zip(out, cells, strict=True):
                results.append(cell(k))
        return out

    run = uuid.uuid4().hex[:6]
    print_(
        f"\nThemis (3 shards, RAID1, no model) vs etcd {etcd_version()} (3 members), "
        f"same client, ~{len(VALUE)}-byte values, {seconds:g} s per cell"
        + (f", median of {repeats} interleaved repeats" if repeats > 1 else "")
        + "; ratio = Themis / etcd"
    )
    print_(
        "\n| writes | clients | Themis round-robin /s | Themis token-aware /s | etcd put /s | ratio rr "
        "| ratio token-aware | server CPU ms/write, Themis token-aware | server CPU ms/put, etcd |"
    )
    print_("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in clients:
        for concern in ("1", "majority", "all"):
            # etcd measured next to each pair of Themis cells: this machine's speed drifts
            def write(routing: str, pids: list[int] | None, c: str = concern, n: int = n):
                return lambda k: m(t.write(c, routing, f"{run}w{c}{routing[0]}{n}r{k}"), n, headers, pids)

            peer, rr, ta = row(
                lambda k, c=concern, n=n: m(e.put(f"{run}e{c}{n}r{k}"), n, pids=e.pids),
                write("round-robin", None),
                write("token-aware", t.pids),
            )
            mp, mr, mt = median_of(peer), median_of(rr), median_of(ta)
            print_(
                f"| w={concern} | {n} | {_cell(mr)} | {_cell(mt)} | {_cell(mp)} | {_ratio(rr, peer)} "
                f"| {_ratio(ta, peer)} | {_cpu(mt)} | {_cpu(mp)} |"
            )
    print_(
        "\n| reads (GET one key) | clients | Themis round-robin /s | Themis token-aware /s "
        "| etcd linearizable range /s | etcd serializable range /s | ratio rr / lin "
        "| ratio token-aware / lin | ratio token-aware / ser |"
    )
    print_("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in clients:
        lin, ser, rr, ta = row(
            lambda _k, n=n: m(e.range(False), n),
            lambda _k, n=n: m(e.range(True), n),
            lambda _k, n=n: m(t.read("round-robin"), n, headers),
            lambda _k, n=n: m(t.read("token-aware"), n, headers),
        )
        print_(
            f"| GET | {n} | {_cell(median_of(rr))} | {_cell(median_of(ta))} | {_cell(median_of(lin))} "
            f"| {_cell(median_of(ser))} | {_ratio(rr, lin)} | {_ratio(ta, lin)} | {_ratio(ta, ser)} |"
        )
    print_("\n| 2-key transactions (w=all) | clients | Themis /s | etcd txn /s | ratio |")
    print_("|---|---:|---:|---:|---:|")
    cases = [
        ("single-shard, token-aware", "same-owners", "token-aware"),
        ("single-shard, round-robin", "same-owners", "round-robin"),
        ("one primary, split owners (2PC), token-aware", "split-owners", "token-aware"),
        ("cross-shard (2PC), round-robin", "cross", "round-robin"),
    ]
    for n in clients:
        peer, *ours = row(
            lambda k, n=n: m(e.txn(f"{run}x{n}r{k}"), n),
            *(
                lambda k, n=n, s=shape, r=routing: m(t.txn(s, r, f"{run}t{s[0]}{r[0]}{n}r{k}"), n, headers)
                for _, shape, routing in cases
            ),
        )
        for (label, _, _), results in zip(cases, ours, strict=True):
            print_(
                f"| {label} | {n} | {_cell(median_of(results))} | {_cell(median_of(peer))} "
                f"| {_ratio(results, peer)} |"
            )
    if errors:
        print_("\nfirst errors: " + "; ".join(sorted(set(errors))[:5]))
