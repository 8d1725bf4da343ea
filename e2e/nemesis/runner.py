"""One nemesis run: a 3-shard RAID1 cluster of real shard processes behind the proxy mesh,
the workloads and the nemesis at once for ``seconds``, then heal, converge, read everything
back and check. Returns a :class:`Report` (its ``table()`` is what the suite prints)."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from themis_client import ThemisClient

from ..conftest import Authority, LocalCluster, peer_auth
from . import checkers, porcupine
from .faults import KINDS, Fault, Nemesis, schedule
from .history import History, Op, Outcome
from .proxy import Mesh
from .workloads import (
    ACCOUNTS,
    REGISTERS,
    SETS,
    START_BALANCE,
    Bank,
    BankWorker,
    RegisterWorker,
    SetWorker,
)

#: Shard settings of the run: short timeouts so faults of a few seconds are seen as such,
#: anti-entropy often enough to converge within the check's wait, and linearizable reads (the
#: default; the replica fallback serves stale reads under partitions:
#: ``THEMIS_NEMESIS_READ_FALLBACK=1`` turns it on, and the register checker then finds them).
SHARD_ENV = {
    "THEMIS_CLUSTER_READ_FROM_REPLICAS": "false",
    "THEMIS_CLUSTER_REQUEST_TIMEOUT_S": "3",
    "THEMIS_CLUSTER_CONNECT_TIMEOUT_S": "2",
    "THEMIS_CLUSTER_MAX_RETRIES": "1",
    "THEMIS_CLUSTER_ANTI_ENTROPY_INTERVAL_S": "5",
}
CLIENT_TIMEOUT_S = 10.0
CONVERGE_S = 60.0


@dataclass
class Report:
    seed: int
    seconds: float
    fencing: bool
    ops: list[Op]
    faults: list[Fault]
    anomalies: list[str] = field(default_factory=list)
    undecided: int = 0
    groups: int = 0
    #: the plan authority's changes of the in-sync set, in order
    epochs: list[str] = field(default_factory=list)

    def table(self) -> str:
        fencing = "on" if self.fencing else "OFF (unsafe)"
        lines = [
            f"nemesis seed={self.seed} seconds={self.seconds:g} fencing={fencing} bank groups={self.groups}",
            f"{'workload':<10} {'op':<9} {'ok':>6} {'fail':>6} {'info':>6}",
        ]
        counts = Counter((o.workload, o.f, o.outcome) for o in self.ops)
        for workload, f in sorted({(w, f) for w, f, _ in counts}):
            row = [counts[(workload, f, k)] for k in Outcome]
            lines.append(f"{workload:<10} {f:<9} {row[0]:>6} {row[1]:>6} {row[2]:>6}")
        errors = Counter(f"{o.outcome} {o.error}" for o in self.ops if o.error)
        lines.append("errors: " + ", ".join(f"{e} x{n}" for e, n in errors.most_common(8)))
        kinds = Counter(f.kind for f in self.faults)
        lines.append(
            "faults: " + ", ".join(f"{k} {kinds[k]}" for k in KINDS) + f" (total {len(self.faults)})"
        )
        lines.append(f"failovers: {len(self.epochs)} epoch(s): " + "; ".join(self.epochs[:12]))
        lines.append(
            f"anomalies: {len(self.anomalies)}"
            + (f" (registers undecided: {self.undecided})" if self.undecided else "")
        )
        lines += [f"  {a}" for a in self.anomalies[:20]]
        if len(self.anomalies) > 20:
            lines.append(f"  ... {len(self.anomalies) - 20} more")
        return "\n".join(lines)


def _primaries(plan, collection: str, keys: Sequence[str]) -> dict[str, list[str]]:
    from themis_shard.cluster.placement.owners import Topology

    topo = Topology.of(plan, plan.members[0].shard_id)
    out: dict[str, list[str]] = {}
    for k in keys:
        out.setdefault(topo.owners(collection, k)[0], []).append(k)
    return out


def _owners(plan, collection: str, key: str) -> list[str]:
    from themis_shard.cluster.placement.owners import Topology

    return Topology.of(plan, plan.members[0].shard_id).owners(collection, key)


def run(
    root: Path,
    seed: int,
    seconds: float,
    *,
    fencing: bool = True,
    kinds: Sequence[str] = KINDS,
    workers: int = 2,
    say: Callable[[str], None] = print,
) -> Report:
    rng = random.Random(seed)
    env = dict(SHARD_ENV)
    if os.environ.get("THEMIS_NEMESIS_READ_FALLBACK") == "1":
        env["THEMIS_CLUSTER_READ_FROM_REPLICAS"] = "true"
    if not fencing:
        env["THEMIS_UNSAFE_DISABLE_FENCING"] = "true"
    from themis_core.plan import FailoverSettings

    # With fencing on, the plan authority fails a dead shard's keys over (``plan_authority.in_sync``).
    cluster = LocalCluster(
        root, 3, "raid1", env=env, failover=FailoverSettings() if fencing else None, log_level="info"
    )
    mesh = Mesh(dict(zip(cluster.ids, cluster.ports, strict=True)))
    mesh.start()
    try:
        for sid, path in mesh.write_plans(cluster.plan, root).items():
            cluster.shard_env[sid] = {"THEMIS_PLAN_PATH": str(path)}
        cluster.start_all()
        with Authority(MeshPlans(cluster, mesh, root)) as authority:
            report = _run(cluster, mesh, rng, seed, seconds, fencing, kinds, workers, say)
        report.epochs = [
            f"e{p.plan_epoch}: out {','.join(p.out_of_sync) or '-'} rejoining {','.join(p.rejoining) or '-'}"
            for p in authority.supervisor.changes
        ]
        return report
    finally:
        for proc in cluster.procs.values():  # a paused shard must wake to die cleanly
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
        cluster.stop()
        mesh.stop()


class MeshPlans:
    """The authority's plan store here: every shard has its own copy (the others through the
    mesh), all rewritten at once (``supervisor.PlanStore``)."""

    def __init__(self, cluster, mesh: Mesh, root: Path) -> None:
        self.cluster, self.mesh, self.root = cluster, mesh, root

    def read(self):
        return self.cluster.plan

    def write(self, plan) -> None:
        self.cluster.plan = plan
        self.mesh.write_plans(plan, self.root)


def _run(cluster, mesh, rng, seed, seconds, fencing, kinds, workers, say) -> Report:
    urls = [cluster.url(s) for s in cluster.ids]
    registers = [f"r{i}" for i in range(6)]
    sets = [f"s{i}" for i in range(3)]
    by_primary = _primaries(cluster.plan, ACCOUNTS, [f"a{i}" for i in range(60)])
    by_primary = {p: keys[:4] for p, keys in sorted(by_primary.items())}
    with ThemisClient(urls) as db:
        for k in registers:
            db.put(REGISTERS, k, {"value": "init"})
        for k in sets:
            db.put(SETS, k, {"elements": []})
        for keys in by_primary.values():
            for k in keys:
                db.put(ACCOUNTS, k, {"balance": START_BALANCE})
        bank = Bank.probe(db, by_primary)
    initial = {k: (1, "init") for k in registers}

    history = History()
    stop = threading.Event()
    pool = []
    for i in range(workers):
        pool += [
            RegisterWorker(3 * i, history, urls, seed, CLIENT_TIMEOUT_S, keys=registers),
            BankWorker(3 * i + 1, history, urls, seed, CLIENT_TIMEOUT_S, bank=bank),
            SetWorker(3 * i + 2, history, urls, seed, CLIENT_TIMEOUT_S, keys=sets),
        ]
    threads = [threading.Thread(target=w.loop, args=(stop,), daemon=True) for w in pool]
    nemesis = Nemesis(cluster, mesh, schedule(rng, seconds, cluster.ids, kinds), say)
    for t in threads:
        t.start()
    nemesis.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(CLIENT_TIMEOUT_S * 3)
    nemesis.stop()
    if nemesis.error is not None:
        raise RuntimeError(f"nemesis failed (seed {seed})") from nemesis.error
    _heal(cluster, mesh)

    copies = _converge(
        cluster,
        [(REGISTERS, k) for k in registers]
        + [(SETS, k) for k in sets]
        + [(ACCOUNTS, k) for keys in bank.groups.values() for k in keys],
    )
    ops = history.snapshot()
    final_sets: dict[str, list] = {}
    with ThemisClient(urls) as db:
        for k in registers:
            doc = db.get(REGISTERS, k)
            t = time.monotonic()
            ops.append(
                Op(-1, "register", "read", k, None, t, t, Outcome.OK, (doc.version, doc.document["value"]))
            )
        for group, keys in bank.groups.items():
            t = time.monotonic()
            balances = {k: db.get(ACCOUNTS, k).document["balance"] for k in keys}
            ops.append(Op(-1, "bank", "final", group, None, t, t, Outcome.OK, balances))
        for k in sets:
            final_sets[k] = db.get(SETS, k).document["elements"]

    _dump(cluster.root / "history.jsonl", ops, nemesis.injected)
    registers_bad, undecided = checkers.register_anomalies(ops, initial)
    anomalies = (
        registers_bad
        + checkers.bank_anomalies(ops, bank.totals)
        + checkers.set_anomalies(ops, final_sets)
        + checkers.replica_anomalies(copies)
        + porcupine.anomalies(ops, initial, cluster.root / "porcupine.jsonl")  # the independent check
    )
    return Report(seed, seconds, fencing, ops, nemesis.injected, anomalies, undecided, len(bank.groups))


def _dump(path: Path, ops: list[Op], faults: list[Fault]) -> None:
    """The run's history and faults, one JSON object a line, for reading a failure afterwards."""
    with path.open("w") as out:
        for fault in faults:
            out.write(json.dumps({"fault": dataclasses.asdict(fault)}) + "\n")
        for op in sorted(ops, key=lambda o: o.invoke):
            out.write(json.dumps({"op": dataclasses.asdict(op)}, default=str) + "\n")


def _heal(cluster, mesh) -> None:
    mesh.heal()
    for sid in cluster.ids:
        proc = cluster.procs.get(sid)
        if proc is None or proc.poll() is not None:
            cluster.procs.pop(sid, None)
            cluster.start(sid, wait=False)
        else:
            os.kill(proc.pid, signal.SIGCONT)
    for sid in cluster.ids:
        cluster.wait_ready(sid)


def _replica(url: str, collection: str, key: str) -> tuple | None:
    r = httpx.get(
        f"{url}/internal/documents/{collection}/{key}",
        params={"tombstones": "true"},
        timeout=10,
        auth=peer_auth(),
    )
    if r.status_code == 404:
        return None
    r.raise_for_status()
    d = r.json()
    return d["version"], d["hlc"], d["origin"], d["document"]


def _converge(cluster, keys: list[tuple[str, str]]) -> dict:
    """Each owner's record of each key, once they agree (or after ``CONVERGE_S``: the
    replica checker then reports what still differs)."""
    deadline = time.monotonic() + CONVERGE_S
    while True:
        copies = {
            (c, k): {o: _replica(cluster.url(o), c, k) for o in _owners(cluster.plan, c, k)} for c, k in keys
        }
        if not checkers.replica_anomalies(copies) or time.monotonic() > deadline:
            return copies
        time.sleep(1.0)
