"""Spec: cross-shard transactions on a real 3-shard RAID1 cluster commit atomically by two-phase
commit — on every participant or on none — survive ``kill -9`` of a participant or of the
coordinator between prepare and commit, and are serializable with ``check`` operations (write
skew and lost updates abort with 409).

shard-0 coordinates the fault tests and runs with ``THEMIS_TXN_PAUSE_AFTER_PREPARE_S``: it sleeps
after every participant prepared and before it logs the decision, the window the kills land in.
The other tests go through shard-1 and shard-2, which do not pause."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pytest
from themis_client import Conflict, Operation, ThemisClient, Unavailable, VersionConflict

from .conftest import LocalCluster, peer_auth, wait_ready

pytestmark = pytest.mark.e2e

PAUSE_S = 4.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(
        tmp_path_factory.mktemp("txn"),
        3,
        env={"THEMIS_TXN_RESOLVE_AFTER_S": "1"},
        shard_env={"shard-0": {"THEMIS_TXN_PAUSE_AFTER_PREPARE_S": str(PAUSE_S)}},
    )
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop()


_used: set[str] = set()


def key_on(cluster: LocalCluster, primary: str, collection: str = "acc") -> str:
    """A fresh key whose primary is ``primary``."""
    from themis_shard.cluster.placement.owners import Topology

    topo = Topology.of(cluster.plan, "shard-0")
    key = next(
        k
        for k in (f"k{i}" for i in range(10_000))
        if k not in _used and topo.owners(collection, k)[0] == primary
    )
    _used.add(key)
    return key


def owners(cluster: LocalCluster, key: str, collection: str = "acc") -> list[str]:
    from themis_shard.cluster.placement.owners import Topology

    return Topology.of(cluster.plan, "shard-0").owners(collection, key)


def local_copy(cluster: LocalCluster, shard: str, key: str) -> tuple[int, dict | None]:
    """What ``shard`` itself stores for ``acc/key`` (version 0: nothing)."""
    r = httpx.get(f"{cluster.url(shard)}/internal/documents/acc/{key}", auth=peer_auth(), timeout=10)
    return (0, None) if r.status_code == 404 else (r.json()["version"], r.json()["document"])


def in_doubt(cluster: LocalCluster, shard: str) -> float:
    text = httpx.get(f"{cluster.url(shard)}/metrics", timeout=10).text
    line = next(li for li in text.splitlines() if li.startswith("themis_txn_in_doubt "))
    return float(line.split()[1])


def eventually(check: Callable[[], bool], timeout: float = 40.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, Unavailable):  # a restarted peer: breakers close on their next probe
            pass
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def everywhere(cluster: LocalCluster, key: str, version: int, document: dict) -> bool:
    """Both owners hold the version, and every live shard serves it."""
    held = all(local_copy(cluster, s, key) == (version, document) for s in owners(cluster, key))
    served = True
    for s in list(cluster.procs):
        with ThemisClient(cluster.url(s)) as reader:
            served = served and reader.get("acc", key).version == version
    return held and served


def in_background(fn: Callable[[], object]) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except Exception as exc:  # the test inspects it
            out["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, out


def test_a_cross_shard_transaction_commits_atomically_and_every_shard_sees_it(cluster) -> None:
    a, b = key_on(cluster, "shard-1"), key_on(cluster, "shard-2")
    with ThemisClient(cluster.url("shard-1")) as themis:
        done = themis.transaction([Operation.put("acc", a, {"n": 1}), Operation.put("acc", b, {"n": 2})])
        assert done.committed and [r.version for r in done.results] == [1, 1]
        done = themis.transaction(
            [Operation.put("acc", b, {"n": 3}, if_version=1), Operation.delete("acc", a, if_version=1)]
        )
        assert [(r.op, r.version) for r in done.results] == [("put", 2), ("delete", 2)]
    assert everywhere(cluster, b, 2, {"n": 3})
    for shard in cluster.ids:
        assert local_copy(cluster, shard, a)[1] is None  # the delete, on both owners
    assert all(in_doubt(cluster, s) == 0 for s in cluster.ids)


def test_a_failed_condition_on_one_participant_aborts_all(cluster) -> None:
    a, b = key_on(cluster, "shard-0"), key_on(cluster, "shard-1")
    with ThemisClient(cluster.url("shard-2")) as themis:
        themis.put("acc", a, {"n": 0})
        themis.put("acc", b, {"n": 0})
        with pytest.raises(VersionConflict):
            themis.transaction(
                [
                    Operation.put("acc", a, {"n": 1}, if_version=1),
                    Operation.put("acc", b, {"n": 1}, if_version=7),
                ]
            )
        assert everywhere(cluster, a, 1, {"n": 0}) and everywhere(cluster, b, 1, {"n": 0})
        assert themis.put("acc", a, {"n": 2}).version == 2  # nothing left locked


def test_write_skew_aborts_one_of_two_transactions(cluster) -> None:
    """G2: two doctors on call (x, y on different shards); each reads both and, seeing the
    other on call, goes off call. Serializable: one of them must fail."""
    x, y = key_on(cluster, "shard-1"), key_on(cluster, "shard-2")
    with ThemisClient(cluster.url("shard-1")) as t1, ThemisClient(cluster.url("shard-2")) as t2:
        t1.put("acc", x, {"on_call": True})
        t1.put("acc", y, {"on_call": True})
        seen = {k: t1.get("acc", k).version for k in (x, y)}  # both transactions read x and y here
        t1.transaction(
            [
                Operation.put("acc", x, {"on_call": False}, if_version=seen[x]),
                Operation.check("acc", y, seen[y]),
            ]
        )
        with pytest.raises(VersionConflict):
            t2.transaction(
                [
                    Operation.put("acc", y, {"on_call": False}, if_version=seen[y]),
                    Operation.check("acc", x, seen[x]),
                ]
            )
        assert t2.get("acc", y).document == {"on_call": True}

        for _ in range(5):  # and at the same time: never both
            t1.put("acc", x, {"on_call": True})
            t1.put("acc", y, {"on_call": True})
            seen = {k: t1.get("acc", k).version for k in (x, y)}
            go = threading.Barrier(2)

            def off(me: str, other: str, client: ThemisClient, seen=seen, go=go) -> object:
                go.wait()
                return client.transaction(
                    [
                        Operation.put("acc", me, {"on_call": False}, if_version=seen[me]),
                        Operation.check("acc", other, seen[other]),
                    ]
                )

            runs = [in_background(lambda m=m, o=o, c=c: off(m, o, c)) for m, o, c in ((x, y, t1), (y, x, t2))]
            for thread, _ in runs:
                thread.join()
            committed = [out for _, out in runs if "result" in out]
            assert len(committed) <= 1, "write skew: both went off call"
            for _, out in runs:
                assert "result" in out or out["error"].status == 409, out
            on_call = [t1.get("acc", k).document["on_call"] for k in (x, y)]
            assert any(on_call)


def test_concurrent_cross_shard_increments_lose_no_update(cluster) -> None:
    a, b = key_on(cluster, "shard-1"), key_on(cluster, "shard-2")
    with ThemisClient(cluster.url("shard-2")) as setup:
        setup.put("acc", a, {"n": 0})
        setup.put("acc", b, {"n": 0})
    commits: list[int] = []

    def worker(via: str) -> None:
        with ThemisClient(cluster.url(via)) as themis:
            for _ in range(8):
                while True:
                    va, vb = themis.get("acc", a), themis.get("acc", b)
                    try:
                        themis.transaction(
                            [
                                Operation.put("acc", a, {"n": va.document["n"] + 1}, if_version=va.version),
                                Operation.put("acc", b, {"n": vb.document["n"] + 1}, if_version=vb.version),
                            ]
                        )
                        commits.append(1)
                        break
                    except Conflict:  # a stale if_version, or the other worker's prepare holds a key
                        continue

    threads = [threading.Thread(target=worker, args=(s,)) for s in ("shard-1", "shard-2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with ThemisClient(cluster.url("shard-1")) as themis:
        assert themis.get("acc", a).document == {"n": len(commits)} == themis.get("acc", b).document
        assert len(commits) == 16


def test_a_participant_killed_between_prepare_and_commit_commits_after_restart(cluster) -> None:
    a, b = key_on(cluster, "shard-1"), key_on(cluster, "shard-2")
    with ThemisClient(cluster.url("shard-1")) as setup:
        setup.put("acc", a, {"n": 0})
        setup.put("acc", b, {"n": 0})
    coordinator = ThemisClient(cluster.url("shard-0"), timeout=60)
    thread, out = in_background(
        lambda: coordinator.transaction(
            [Operation.put("acc", a, {"n": 1}, if_version=1), Operation.put("acc", b, {"n": 1}, if_version=1)]
        )
    )
    eventually(
        lambda: in_doubt(cluster, "shard-1") >= 1 and in_doubt(cluster, "shard-2") >= 1, what="prepared"
    )
    cluster.kill("shard-1")  # kill -9 while the coordinator pauses between prepare and decision
    thread.join()
    assert out["result"].committed  # the decision was logged: the transaction is committed
    eventually(lambda: local_copy(cluster, "shard-2", b)[0] == 2, what="b installed on its primary")
    cluster.start("shard-1")
    eventually(
        lambda: everywhere(cluster, a, 2, {"n": 1}) and everywhere(cluster, b, 2, {"n": 1}), what="all"
    )
    eventually(lambda: all(in_doubt(cluster, s) == 0 for s in cluster.ids), what="no intents left")


def test_a_coordinator_killed_before_deciding_leaves_nothing_committed(cluster) -> None:
    a, b = key_on(cluster, "shard-1"), key_on(cluster, "shard-2")
    with ThemisClient(cluster.url("shard-2")) as setup:
        setup.put("acc", a, {"n": 0})
        setup.put("acc", b, {"n": 0})
    coordinator = ThemisClient(cluster.url("shard-0"), timeout=60)
    thread, out = in_background(
        lambda: coordinator.transaction(
            [Operation.put("acc", a, {"n": 1}), Operation.put("acc", b, {"n": 1})]
        )
    )
    eventually(
        lambda: in_doubt(cluster, "shard-1") >= 1 and in_doubt(cluster, "shard-2") >= 1, what="prepared"
    )
    cluster.kill("shard-0")
    thread.join()
    assert "error" in out  # the client never got an answer
    with httpx.Client(timeout=10) as c:  # in doubt: the prepared keys refuse writes meanwhile
        r = c.put(f"{cluster.url('shard-1')}/v1/collections/acc/documents/{a}?w=1", json={"n": 9})
        assert r.status_code == 409 and r.json()["error"]["code"] == "transaction_in_progress", r.text
    cluster.start("shard-0")  # knows no decision: presumed abort
    eventually(lambda: all(in_doubt(cluster, s) == 0 for s in cluster.ids), what="intents resolved")
    assert everywhere(cluster, a, 1, {"n": 0}) and everywhere(cluster, b, 1, {"n": 0})
    with ThemisClient(cluster.url("shard-1")) as themis:
        assert themis.put("acc", a, {"n": 2}).version == 2


def test_a_coordinator_killed_after_logging_commit_re_drives_it_after_restart(cluster) -> None:
    a, b = key_on(cluster, "shard-1"), key_on(cluster, "shard-2")
    with ThemisClient(cluster.url("shard-2")) as setup:
        setup.put("acc", a, {"n": 0})
        setup.put("acc", b, {"n": 0})
    coordinator = ThemisClient(cluster.url("shard-0"), timeout=60)
    thread, out = in_background(
        lambda: coordinator.transaction(
            [Operation.put("acc", a, {"n": 1}), Operation.put("acc", b, {"n": 1})]
        )
    )
    eventually(
        lambda: in_doubt(cluster, "shard-1") >= 1 and in_doubt(cluster, "shard-2") >= 1, what="prepared"
    )
    cluster.kill("shard-1")  # misses phase 2 ...
    thread.join()
    assert out["result"].committed
    cluster.kill("shard-0")  # ... and the coordinator dies before re-driving it
    cluster.start("shard-1", wait=False)
    cluster.start("shard-0", wait=False)
    for s in ("shard-0", "shard-1"):
        wait_ready(cluster.url(s), 120, cluster.procs[s])
    eventually(
        lambda: everywhere(cluster, a, 2, {"n": 1}) and everywhere(cluster, b, 2, {"n": 1}), what="all"
    )
    eventually(lambda: all(in_doubt(cluster, s) == 0 for s in cluster.ids), what="no intents left")
