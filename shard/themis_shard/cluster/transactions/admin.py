"""Cluster-wide questions about transactions, asked of every member at once: a client's "what
became of my transaction?" (``GET /v1/transactions/{id}``), and an operator's list of the
transactions in doubt and their resolution (``/v1/cluster/transactions``, ``themis txn``).

A transaction's fate is spread over its coordinator's, deciders' and participants' logs, and
the asking shard does not know which shards those were, so it asks all of them. An id that no
shard knows is fenced everywhere before the answer: then it can never commit, and "aborted"
is definite (``decisions.outcome_after_fence``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from ...storage.intents import Decision, client_id
from ..placement.views import TopologySource
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor
from .decisions import Outcome, Status, id_outcome, id_outcome_after_fence

log = logging.getLogger(__name__)


class LocalTransactions(Protocol):
    """This shard's own answers (``service.Transactions``)."""

    def status(self, txn: str) -> Status: ...

    async def fence(self, txn: str) -> Status: ...

    def listing(self) -> dict: ...

    @property
    def resolver(self) -> Any: ...


@dataclass(frozen=True)
class Answer:
    """The cluster's answer about one transaction id."""

    txn: str
    outcome: Outcome
    message: str
    unanswered: tuple[str, ...] = ()


MESSAGES = {
    Outcome.COMMITTED: "committed: every write of it is applied",
    Outcome.ABORTED: "aborted: none of its writes is applied, and none ever will be",
    Outcome.IN_PROGRESS: "in progress: prepared or being decided; it settles within {bound:.0f} s, ask again",
}


def summarize(listings: dict[str, dict | None]) -> list[dict]:
    """Every transaction some shard still holds, coordinates or re-drives, one row per attempt,
    oldest first: which shards hold it and how (pure; ``listings`` is each shard's ``listing()``)."""
    rows: dict[str, dict] = {}
    for shard, listing in sorted(listings.items()):
        if listing is None:
            continue
        for i in listing["intents"]:
            row = rows.setdefault(i["txn"], _row(i["txn"]))
            row["coordinator"] = i["coordinator"]
            row["deciders"] = i["deciders"]
            row["age_s"] = max(row["age_s"], i["age_s"])
            row["keys"] = sorted(set(row["keys"]) | set(i["keys"]))
            row["held_by"].append({"shard": shard, "role": i["role"], "primary": i["primary"]})
            row["state"] = "in_doubt" if row["state"] == "none" else row["state"]
        for txn in listing["running"]:
            row = rows.setdefault(txn, _row(txn))
            row["coordinator"], row["state"] = shard, "running"
        for txn in listing["committing"]:
            row = rows.setdefault(txn, _row(txn))
            row["coordinator"] = shard
            if row["state"] != "running":
                row["state"] = "committing"
    return sorted(rows.values(), key=lambda r: (-r["age_s"], r["attempt"]))


def _row(name: str) -> dict:
    return {
        "id": client_id(name),
        "attempt": name,
        "state": "none",
        "coordinator": None,
        "deciders": [],
        "keys": [],
        "age_s": 0.0,
        "held_by": [],
    }


class ClusterTransactions:
    def __init__(
        self,
        local: LocalTransactions,
        executor: RemoteExecutor,
        topology: TopologySource,
        *,
        call_timeout_s: float,
        bound_s: float = 0.0,
    ) -> None:
        self.local = local
        self.executor = executor
        self._plan = topology
        self.call_timeout_s = call_timeout_s
        self.bound_s = bound_s

    async def _everywhere(
        self, here: Callable[[], Awaitable[Any]], method: str, path: str, body: dict | None = None
    ) -> dict[str, Any]:
        """Every member's answer (None: it gave none), this shard's from ``here``."""
        topo = self._plan.topology

        async def one(shard: str) -> Any:
            if shard == topo.self_id:
                return await here()
            try:
                return await self.executor.request(
                    shard,
                    method,
                    path,
                    json_body=body,
                    idempotent=True,
                    retries=0,
                    timeout_s=self.call_timeout_s,
                )
            except (PeerUnavailable, PeerError) as exc:
                log.info("%s did not answer %s %s: %s", shard, method, path, str(exc))
                return None

        members = topo.members
        return dict(zip(members, await asyncio.gather(*(one(m) for m in members)), strict=True))

    async def _statuses(self, txn: str, what: str) -> dict[str, Status | None]:
        here = (
            (lambda: self.local.fence(txn))
            if what == "fence"
            else (lambda: run_in_threadpool(self.local.status, txn))
        )
        raw = await self._everywhere(here, "POST", f"/internal/txn/{what}", {"txn": txn})
        return {
            s: (r if isinstance(r, Status) else Status.from_json(r)) if r is not None else None
            for s, r in raw.items()
        }

    async def outcome(self, txn: str) -> Answer:
        """What became of ``txn``: committed, aborted, in progress, or unknown."""
        statuses = await self._statuses(txn, "status")
        found = id_outcome(statuses, txn)
        if found is Outcome.UNKNOWN:  # nobody decided or runs it: make it never commit
            statuses = await self._statuses(txn, "fence")
            found = id_outcome_after_fence(statuses, txn, self._plan.topology.plan.copies)
        silent = tuple(s for s, v in statuses.items() if v is None)
        if found is Outcome.UNKNOWN:
            message = (
                f"no shard that answered knows transaction {txn}, and {', '.join(silent)} did not "
                "answer: it may still be in flight there; ask again"
            )
        else:
            message = f"transaction {txn} is " + MESSAGES[found].format(bound=self.bound_s)
        return Answer(txn, found, message, silent)

    async def listing(self) -> tuple[list[dict], tuple[str, ...]]:
        """The transactions in doubt or being decided, and the members that did not answer."""
        raw = await self._everywhere(
            lambda: run_in_threadpool(self.local.listing), "GET", "/internal/txn/list"
        )
        return summarize(raw), tuple(s for s, v in raw.items() if v is None)

    async def resolve(self, txn: str) -> Answer:
        """Run termination for ``txn`` now on every member that holds it (no waiting for the
        timeout: a coordinator still running it finds its deciders fenced and aborts), then
        answer its outcome."""

        async def here() -> dict:
            settled = await self.local.resolver.settle_id(txn, force=True)
            return {
                "decisions": {n: d.value if isinstance(d, Decision) else None for n, d in settled.items()}
            }

        await self._everywhere(here, "POST", "/internal/txn/settle", {"txn": txn})
        return await self.outcome(txn)
