"""Spec: no transaction is left in doubt when its coordinator is gone for good. On a real 3-shard
RAID1 cluster, shard-0 coordinates cross-shard transactions (keys on shard-1 and shard-2) and is
killed with ``kill -9`` while they wait in a fault-injection pause, its data directory removed,
never restarted. Within ``TxnSettings.in_doubt_bound_s`` every prepared intent is settled by
the participants alone — aborted when the coordinator died before COMMIT was final on a decider,
committed when it died after — atomically on every live owner, the keys writable again; the
client whose connection broke learns the definite outcome from ``GET /v1/transactions/{id}``
on another shard; and ``themis txn list|resolve`` show and settle them."""

from __future__ import annotations

import json
import shutil
import time

import httpx
import pytest
from themis_client import Operation, ThemisClient
from themis_shard.cluster.transactions.settings import TxnSettings
from themis_shard.local_cluster import main as themis

from .conftest import peer_auth
from .test_cross_shard_transactions import eventually, in_background, in_doubt, key_on, owners

pytestmark = pytest.mark.e2e


def env(timeout_s: float) -> dict[str, str]:
    return {
        "THEMIS_TXN_TIMEOUT_S": str(timeout_s),
        "THEMIS_TXN_RESOLVE_AFTER_S": "1",
        "THEMIS_TXN_RESOLVE_INTERVAL_S": "0.5",
        "THEMIS_TXN_CALL_TIMEOUT_S": "5",
    }


def bound(timeout_s: float) -> float:
    """The promise under test, from the same settings the shards run with."""
    return TxnSettings(timeout_s=timeout_s, resolve_interval_s=0.5, call_timeout_s=5).in_doubt_bound_s


SLACK_S = 30.0  # a loaded 2-core machine; the bound is what the shards promise, this is the test's patience
N = 3


def status(cluster, shard: str, txn: str) -> dict:
    """``shard``'s own knowledge of the one attempt at ``txn`` (asking it fences nothing; a
    client's id is run under an attempt's name, which the answer lists)."""
    r = httpx.post(
        f"{cluster.url(shard)}/internal/txn/status", json={"txn": txn}, auth=peer_auth(), timeout=10
    )
    r.raise_for_status()
    attempts = list(r.json().get("attempts", {}).values())
    assert len(attempts) <= 1, attempts
    return attempts[0] if attempts else r.json()


def start_transactions(cluster, tag: str, ready) -> list[tuple[str, str, str, tuple]]:
    """N cross-shard transactions through shard-0, in the background, each once its keys exist
    and until ``ready(txn)``; returns (id, key on shard-1, key on shard-2, (thread, outcome))."""
    out = []
    for i in range(N):
        a, b = key_on(cluster, "shard-1", "tt"), key_on(cluster, "shard-2", "tt")
        with ThemisClient(cluster.url("shard-1")) as setup:
            setup.put("tt", a, {"n": 0})
            setup.put("tt", b, {"n": 0})
        txn = f"{tag}-{i}"
        coordinator = ThemisClient(cluster.url("shard-0"), timeout=120)
        ops = [Operation.put("tt", a, {"n": 1}), Operation.put("tt", b, {"n": 1})]
        out.append((txn, a, b, in_background(lambda c=coordinator, o=ops, t=txn: c.transaction(o, txn_id=t))))
        eventually(lambda t=txn: ready(t), what=f"{txn} under way")
    return out


def local_copy(cluster, shard: str, key: str) -> tuple[int, dict | None]:
    """What ``shard`` itself stores for ``tt/key`` (version 0: nothing)."""
    r = httpx.get(f"{cluster.url(shard)}/internal/documents/tt/{key}", auth=peer_auth(), timeout=10)
    return (0, None) if r.status_code == 404 else (r.json()["version"], r.json()["document"])


def write(cluster, shard: str, key: str, document: dict) -> int:
    """A plain write at w=1 (the dead shard is one of the key's two owners: w=all cannot be met
    until the plan changes); returns its version."""
    r = httpx.put(f"{cluster.url(shard)}/v1/collections/tt/documents/{key}?w=1", json=document, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["version"]


def kill_for_good(cluster, shard: str) -> float:
    cluster.kill(shard)  # SIGKILL
    shutil.rmtree(cluster.root / shard)  # its volume is lost: it never comes back
    return time.monotonic()


def settled_everywhere(cluster, keys: list[str], version: int, document: dict) -> bool:
    live = [s for s in cluster.ids if s in cluster.procs]
    return all(
        local_copy(cluster, s, k) == (version, document)
        for k in keys
        for s in owners(cluster, k, "tt")
        if s in live
    ) and all(in_doubt(cluster, s) == 0 for s in live)


def outcome(cluster, shard: str, txn: str) -> str:
    with ThemisClient(cluster.url(shard)) as themis_client:
        return themis_client.transaction_outcome(txn).outcome


def cli(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = themis(list(args))
    return code, capsys.readouterr().out


def test_a_coordinator_gone_for_good_before_commit_was_final_leaves_every_transaction_aborted(
    local_cluster, capsys
) -> None:
    # a timeout long enough that every intent is still prepared when the test lists them
    timeout_s = 30.0
    cluster = local_cluster(
        3, env=env(timeout_s), shard_env={"shard-0": {"THEMIS_TXN_PAUSE_AFTER_PREPARE_S": "120"}}
    )
    txns = start_transactions(
        cluster, "before", lambda t: all(status(cluster, s, t)["prepared"] for s in ("shard-1", "shard-2"))
    )
    code, listed = cli(capsys, "txn", "list", "--url", cluster.url("shard-2"), "--json")
    rows = {t["id"]: t for t in json.loads(listed)["transactions"]}
    assert code == 0
    for txn, a, b, _ in txns:  # the operator's view: shard-0 runs them, both primaries hold them
        assert rows[txn]["state"] == "running" and rows[txn]["coordinator"] == "shard-0"
        assert {h["shard"] for h in rows[txn]["held_by"] if h["role"] == "primary"} == {"shard-1", "shard-2"}
        assert rows[txn]["keys"] == sorted([f"tt/{a}", f"tt/{b}"])

    killed = kill_for_good(cluster, "shard-0")
    for _, _, _, (thread, result) in txns:
        thread.join()
        assert "error" in result  # the client's connection broke: it does not know the outcome
    keys = [k for _, a, b, _ in txns for k in (a, b)]
    eventually(
        lambda: settled_everywhere(cluster, keys, 1, {"n": 0}),
        timeout=bound(timeout_s) + SLACK_S,
        what=f"every in-doubt transaction aborted within the bound ({bound(timeout_s):.0f} s)",
    )
    with capsys.disabled():  # a measurement for the reader, not an assertion
        print(f"\nsettled {time.monotonic() - killed:.1f} s after the kill (bound {bound(timeout_s):.1f} s)")
    for txn, a, b, _ in txns:
        assert outcome(cluster, "shard-1", txn) == outcome(cluster, "shard-2", txn) == "aborted"
        assert (
            write(cluster, "shard-2", a, {"n": 2}) == write(cluster, "shard-2", b, {"n": 2}) == 2
        )  # unlocked
    code, resolved = cli(capsys, "txn", "resolve", txns[0][0], "--url", cluster.url("shard-1"))
    assert code == 0 and resolved.startswith(f"{txns[0][0]} aborted"), resolved
    code, listed = cli(capsys, "txn", "list", "--url", cluster.url("shard-1"))
    assert "no transaction in doubt" in listed and "did not answer: shard-0" in listed and code == 1


def test_a_coordinator_gone_for_good_after_commit_was_final_leaves_every_transaction_committed(
    local_cluster,
) -> None:
    timeout_s = 10.0
    cluster = local_cluster(
        3, env=env(timeout_s), shard_env={"shard-0": {"THEMIS_TXN_PAUSE_AFTER_DECISION_S": "120"}}
    )
    txns = start_transactions(  # COMMIT final on a decider; the coordinator has not logged it itself
        cluster,
        "after",
        lambda t: any(status(cluster, s, t)["decision"] == "commit" for s in ("shard-1", "shard-2")),
    )
    for txn, *_ in txns:
        assert status(cluster, "shard-0", txn)["running"]  # the coordinator pauses before phase 2
        assert outcome(cluster, "shard-2", txn) == "committed"
    kill_for_good(cluster, "shard-0")
    for _, _, _, (thread, result) in txns:
        thread.join()
        assert "error" in result
    keys = [k for _, a, b, _ in txns for k in (a, b)]
    eventually(
        lambda: settled_everywhere(cluster, keys, 2, {"n": 1}),
        timeout=bound(timeout_s) + SLACK_S,
        what=f"every in-doubt transaction committed within the bound ({bound(timeout_s):.0f} s)",
    )
    with ThemisClient(cluster.url("shard-1")) as after:
        for txn, a, b, _ in txns:
            assert after.transaction_outcome(txn).outcome == "committed"
            assert after.get("tt", a).version == after.get("tt", b).version == 2
            assert write(cluster, "shard-1", a, {"n": 3}) == 3
        # an id no shard knows: fenced on every live shard, so "aborted" is definite, and the id is spent
        assert after.transaction_outcome("never-sent").outcome == "aborted"
        r = httpx.post(
            f"{cluster.url('shard-1')}/v1/transactions",
            json={
                "id": "never-sent",
                "operations": [{"op": "put", "collection": "tt", "key": "z", "document": {}}],
            },
            timeout=30,
        )
        assert r.status_code == 409 and r.json()["error"]["code"] == "transaction_id_in_use", r.text
