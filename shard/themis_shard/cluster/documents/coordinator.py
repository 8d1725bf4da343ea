"""Cluster-wide document operations: any shard accepts any request and routes it.

Writes go to the key's one coordinator in this epoch, its primary owner (``replication/fencing.py`` states
the rule and argues it), which serialises them per key, sends the stamped records to the other
owners first and installs and acknowledges them only once the write concern's number of owners
hold them durably (default: all copies). A write that cannot get there is a 503 and is never
served afterwards. A forwarded write is never retried, on the primary or anywhere else: a
failure that may have reached the primary is reported as such (503 ``write_outcome_unknown``),
not guessed at. Reads go to the primary (linearizable: it answers only as the key's primary in
the reader's epoch, holding its lease), or to any owner with ``read_from_replicas``.
Forwarded calls land on ``/internal/...`` endpoints that never forward again, so a request
makes at most one hop whatever the shards believe about each other.

A transaction whose keys have different coordinators is a cross-shard transaction: it goes
through two-phase commit (``transactions/``, ``CrossShardCommit``) with this shard as its
coordinator; everything else keeps the single-coordinator path. A key locked by a prepared
cross-shard transaction refuses writes (409 ``transaction_in_progress``) until it is decided.
A batch is atomic per coordinator. Keys whose primary is down cannot be written until the plan
authority fails them over to an in-sync copy (``plan_authority.in_sync``).

Why one ~890-line module: single-key writes, batches, reads and the answers to their failures
(burns, forwarding) share one per-key lock table and one mapping of a peer's refusal; 2PC,
fencing, delivery and the lease are packages of their own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from enum import StrEnum
from typing import Any, Protocol, cast

from starlette.concurrency import run_in_threadpool
from themis_core.ring import HashRing

from ...errors import BadRequest, Conflict, InsufficientStorage, NotFound, ThemisError, Unavailable
from ...storage.documents import Change, Check, DocumentStore, Replicated, StoredDocument, Write
from ...storage.inflight import InflightLog
from ...storage.names import urn
from ..placement.owners import Topology, candidates, same_owners
from ..placement.views import ChangingTopology, InSyncWatch, TopologySource
from ..replication.batching import Watch
from ..replication.delivery import NOT_SENT_REASONS, Replication
from ..replication.fencing import (
    DEFAULT_CONCERN,
    FENCE_CODES,
    Delivery,
    KeyLocks,
    Outcome,
    WriteConcern,
    decide,
    fence_refusal,
    floor_refusal,
    primary,
    required_acks,
    write_owners,
)
from ..replication.lease import AuthorityLease, lease_refusal
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor, internal_path

log = logging.getLogger(__name__)


def write_to_json(w: Write) -> dict[str, Any]:
    return {"collection": w.collection, "key": w.key, "document": w.document, "if_version": w.if_version}


def write_from_json(d: dict[str, Any]) -> Write:
    return Write(d["collection"], d["key"], d.get("document"), d.get("if_version"))


def check_to_json(c: Check) -> dict[str, Any]:
    return {"collection": c.collection, "key": c.key, "version": c.version}


def check_from_json(d: dict[str, Any]) -> Check:
    return Check(str(d["collection"]), str(d["key"]), int(d["version"]))


def change_to_json(c: Change) -> dict[str, Any]:
    return {
        "collection": c.collection,
        "key": c.key,
        "version": c.version,
        "document": c.document,
        "previous_version": c.previous_version,
        "hlc": c.hlc,
        "origin": c.origin,
    }


def change_from_json(d: dict[str, Any]) -> Change:
    return Change(
        d["collection"],
        d["key"],
        int(d["version"]),
        d.get("document"),
        int(d["previous_version"]),
        int(d.get("hlc", 0)),
        str(d.get("origin", "")),
    )


def owner_groups(writes: list[Write], topology: Topology) -> dict[tuple[str, ...], list[Write]]:
    """Writes grouped by their keys' owners (so by coordinator too), input order kept: a group
    reaches each owner in one message, applied whole, so it commits without two-phase commit."""
    groups: dict[tuple[str, ...], list[Write]] = {}
    for w in writes:
        groups.setdefault(tuple(topology.owners(w.collection, w.key)), []).append(w)
    return groups


def by_peer(
    topology: Topology, records: list[Replicated], owners: Callable[[str, str], list[str]]
) -> dict[str, list[Replicated]]:
    """Records grouped by the other shards ``owners(collection, key)`` names for them."""
    out: dict[str, list[Replicated]] = {}
    for r in records:
        for owner in owners(r.collection, r.key):
            if owner != topology.self_id:
                out.setdefault(owner, []).append(r)
    return out


class Burned(StrEnum):
    """What a failed write left behind (``_burn``)."""

    NOTHING = "nothing"  # no owner may hold it: nothing was written anywhere
    EVERYWHERE = "everywhere"  # every owner that may hold it holds the burn that outranks it
    PARTLY = "partly"  # an owner that may hold it has not confirmed the burn yet


def burn_failure(short: str, burned: Burned, burns: list[Replicated]) -> Unavailable:
    """The 503 of a write short of its concern, saying truly what it left behind."""
    if burned is Burned.NOTHING:
        return Unavailable(f"{short}; nothing was written", code="replicas_unavailable")
    if burned is Burned.EVERYWHERE:
        first = burns[0]
        return Unavailable(
            f"{short}; the write was not applied, and its version was burned: the document keeps "
            f"its content at a new version ({first.collection}/{first.key} v{first.version})",
            code="replicas_unavailable",
        )
    return Unavailable(
        f"{short}, and an owner that may hold it has not confirmed the burn that cancels it: the "
        "write may or may not take effect; read the document before retrying",
        code="write_outcome_unknown",
    )


#: How long a write keeps being retried while owners disagree on the epoch (plans are re-read
#: every second) or a new owner of a handoff is still starting (seconds, on a busy machine).
EPOCH_RETRY_S = 15.0

#: How long a read keeps being retried while the key's primary changes (a new epoch spreading,
#: a lease being renewed).
READ_RETRY_S = 3.0
#: 503s of a primary that will answer again in a moment.
RETRY_READ_CODES = frozenset({"lease_expired", "starting"})
#: The reason a call stopped waiting for a shard a newer plan took out of the in-sync set.
OUT_OF_SYNC = "out_of_sync"

#: 503 codes a coordinator answers only when it wrote nothing (relayed as they are).
NOTHING_WRITTEN_CODES = frozenset(
    {
        "replicas_unavailable",
        "coordinator_unavailable",
        "epoch_changed",
        "starting",
        "lease_expired",
        "not_enough_replicas",
    }
)


#: Codes of a storage refusal (``storage/health.py``): nothing was written on that disk.
STORAGE_CODES = frozenset({"insufficient_storage", "storage_failed"})


def forward_failure(target: str, what: str, exc: PeerUnavailable) -> ThemisError:
    """The 503 for a forwarded write the coordinator did not answer: "nothing was written"
    only when the request provably never reached it."""
    if exc.status == 503 and exc.code in NOTHING_WRITTEN_CODES:  # the coordinator refused it
        return Unavailable(exc.message, code=exc.code)
    if exc.code in STORAGE_CODES:  # its disk refused it (507 / 503): nothing was written
        return ThemisError(exc.message, code=exc.code, status=exc.status or 507)
    if exc.reason in NOT_SENT_REASONS:
        return Unavailable(
            f"the coordinator of {what} ({target}) is unavailable ({exc.reason}); nothing was written",
            code="coordinator_unavailable",
        )
    if exc.reason == OUT_OF_SYNC:
        return Unavailable(
            f"the coordinator of {what} ({target}) was taken out of the in-sync set while the write "
            "was with it; the write may or may not have been applied: read the document before retrying",
            code="write_outcome_unknown",
        )
    return Unavailable(
        f"the coordinator of {what} ({target}) did not answer ({exc.reason}); the write may or may "
        "not have been applied: read the document before retrying",
        code="write_outcome_unknown",
    )


def holders(topo: Topology, record: Replicated, delivered: dict[str, Delivery]) -> list[str]:
    """The other owners of ``record``'s key that acknowledged holding it (pure)."""
    return [
        o
        for o in write_owners(topo, record.collection, record.key)
        if o != topo.self_id and delivered.get(o) is Delivery.HELD
    ]


async def after_commit(what: str, step: Awaitable[Any]) -> None:
    """Bookkeeping after a write is durable (the in-flight log, hints): a disk that refuses it
    now must not turn an applied write into a failure (crash recovery and anti-entropy redo
    what it would have done)."""
    try:
        await step
    except (InsufficientStorage, Unavailable) as exc:
        if exc.code not in STORAGE_CODES:
            raise
        log.warning("after an applied write, the %s failed: %s", what, exc.message)


def relay(exc: PeerError) -> ThemisError:
    """A peer's 4xx answer, re-raised here unchanged (code, message, status)."""
    return ThemisError(
        exc.message or str(exc), code=getattr(exc, "code", None) or "peer_error", status=exc.status or 400
    )


def refusal(exc: PeerError) -> ThemisError:
    """A peer's refusal of a forwarded write: a fence code (another epoch: provably unapplied)
    becomes a retryable 503 ``epoch_changed``; any other 4xx is relayed unchanged."""
    if getattr(exc, "code", None) in FENCE_CODES:
        return Unavailable(
            f"the cluster plan is changing ({exc.message}); nothing was written, retry",
            code="epoch_changed",
        )
    return relay(exc)


def commit_body(
    writes: list[Write], epoch: int, concern: WriteConcern, checks: list[Check] | None = None
) -> dict[str, Any]:
    """``/internal/commit``'s body; ``checks`` only when there are any (a primary not yet
    upgraded still takes plain writes)."""
    body: dict[str, Any] = {
        "writes": [write_to_json(w) for w in writes],
        "epoch": epoch,
        "concern": concern.value,
    }
    if checks:
        body["checks"] = [check_to_json(c) for c in checks]
    return body


class CrossShardCommit(Protocol):
    """Two-phase commit of a transaction whose keys have several primaries (``transactions``)."""

    async def run(self, writes: list[Write], checks: list[Check], concern: WriteConcern) -> list[Change]: ...


class KeyHolders(Protocol):
    """Which keys prepared cross-shard transactions hold (``storage.intents.IntentStore``)."""

    def holders(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], str]: ...


class HandoffView(Protocol):
    """What reads and writes need of a resharding in progress (``migration.Handoff``)."""

    @property
    def handoff_active(self) -> bool: ...

    def previous_ring(self) -> HashRing | None: ...

    async def fetch_previous(self, collection: str, key: str) -> None: ...


async def first_done(*futures: asyncio.Future) -> None:
    """Until one of ``futures`` is done (none is cancelled or waited for further): what
    ``asyncio.wait(FIRST_COMPLETED)`` does, without its per-call sets, checks and timeout."""
    waiter = asyncio.get_running_loop().create_future()

    def wake(_: asyncio.Future) -> None:
        if not waiter.done():
            waiter.set_result(None)

    for future in futures:
        future.add_done_callback(wake)
    try:
        await waiter
    finally:
        for future in futures:
            future.remove_done_callback(wake)


def _retrieve(task: asyncio.Future) -> None:
    """Consume the outcome of a delivery nobody waits for any more (no "never retrieved" noise)."""
    if not task.cancelled():
        task.exception()


class DistributedDocuments:
    def __init__(
        self,
        store: DocumentStore,
        executor: RemoteExecutor | None,
        replication: Replication,
        topology: TopologySource,
        handoff: HandoffView | None = None,
        *,
        locks: KeyLocks | None = None,
        cross_shard: CrossShardCommit | None = None,
        held: KeyHolders | None = None,
        fencing: bool = True,
        inflight: InflightLog | None = None,
        read_from_replicas: bool = False,
        lease: AuthorityLease | None = None,
    ) -> None:
        """``cross_shard`` commits transactions over several primaries (None: refused, 400
        ``cross_shard_transaction``); ``held`` names the keys their prepared intents lock.
        ``fencing=False`` is ``THEMIS_UNSAFE_DISABLE_FENCING``: the nemesis suite's
        deliberate failure, never a production setting. ``inflight``: the log that makes a
        write to owners reached in separate messages atomic across a crash (None: not kept).
        ``lease``: the plan authority's lease, without which this shard neither coordinates nor
        serves primary reads when the plan has failover on (``replication/lease.py``)."""
        self.store = store
        self.executor = executor
        self.replication = replication
        self._plan = topology
        #: While a ring change is being handed off, reads and writes look back at the previous owners.
        self.handoff = handoff
        #: Writes this shard coordinates, serialised per key from prepare to install (shared
        #: with the two-phase-commit participant).
        self.locks = locks if locks is not None else KeyLocks()  # not `or`: an empty table is falsy
        self.cross_shard = cross_shard
        self.held = held
        self.fencing = fencing
        self.inflight = inflight
        #: False (the default): reads go to the primary only (``ClusterSettings.read_from_replicas``).
        self.read_from_replicas = read_from_replicas
        #: coordinated writes replicating now: with others, this copy's fsync is shared anyway
        self._replicating = 0
        self.lease = lease

    def fence_refusal(self, epoch: int, sender: str, keys: list[tuple[str, str]]) -> Conflict | None:
        """Why a write of ``keys`` coordinated by ``sender`` in ``epoch`` must be refused here."""
        if not self.fencing:
            return None
        return fence_refusal(self.topology, epoch, sender, keys)

    @property
    def topology(self) -> Topology:
        return self._plan.topology

    def _moving(self) -> bool:
        """Is a handoff in progress (new owners may still be starting)?"""
        return self.handoff is not None and self.handoff.handoff_active

    def _down(self) -> frozenset[str]:
        return self.executor.open_peers() if self.executor else frozenset()

    # -- writes ------------------------------------------------------------------------------
    async def commit(
        self, writes: list[Write], concern: WriteConcern = DEFAULT_CONCERN, checks: list[Check] | None = None
    ) -> list[Change]:
        """Route a set of writes (and read checks) to their one coordinator, or through
        two-phase commit when they have several. While a plan change spreads, owners on
        different epochs refuse each other's writes — provably unapplied — so those are retried
        here, from routing on, for a few seconds."""
        checks = checks or []
        delay, deadline = 0.05, asyncio.get_running_loop().time() + EPOCH_RETRY_S
        while True:
            try:
                return await self._commit_once(writes, concern, checks)
            except Unavailable as exc:
                if exc.code != "epoch_changed" or asyncio.get_running_loop().time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _commit_once(
        self, writes: list[Write], concern: WriteConcern, checks: list[Check]
    ) -> list[Change]:
        topo = self.topology
        if not topo.clustered:
            return await self.commit_here(writes, concern, checks)
        keys = [(w.collection, w.key) for w in writes] + [(c.collection, c.key) for c in checks]
        targets = {primary(topo, c, k) for c, k in keys}
        if not targets:
            return []
        # keys on one primary but not the same other owners: two-phase commit too (see
        # transactions/decisions.py ``kind``)
        if len(targets) > 1 or (self.cross_shard is not None and not same_owners(keys, topo)):
            if self.cross_shard is None:
                raise BadRequest(
                    "the keys of this transaction live on different shards "
                    f"({', '.join(sorted(targets))}) and this shard runs no two-phase commit",
                    code="cross_shard_transaction",
                )
            return await self.cross_shard.run(writes, checks, concern)
        [target] = targets
        if target == topo.self_id:
            return await self.commit_here(writes, concern, checks)
        first = writes[0] if writes else checks[0]
        what = f"{first.collection}/{first.key}"
        try:
            await self.executor.revive_or_refuse(target)
            reply = await self._while_in_sync(
                topo,
                target,
                self.executor.request(
                    target,
                    "POST",
                    "/internal/commit",
                    json_body=commit_body(writes, topo.epoch, concern, checks),
                    idempotent=False,
                    retries=0,
                ),
            )
        except PeerUnavailable as exc:
            log.info("coordinator %s of %s unavailable (%s)", target, what, exc.reason)
            if not self.fencing:
                return await self._unfenced_fallback(writes, concern, target)
            if self._moving() and (exc.reason in NOT_SENT_REASONS or exc.code == "starting"):
                raise Unavailable(
                    f"the new coordinator of {what} ({target}) is not serving yet; nothing was written",
                    code="epoch_changed",
                ) from None
            raise forward_failure(target, what, exc) from None
        except PeerError as exc:
            raise refusal(exc) from None
        return [change_from_json(c) for c in reply["changes"]]

    async def _unfenced_fallback(
        self, writes: list[Write], concern: WriteConcern, primary_id: str
    ) -> list[Change]:
        """UNSAFE (fencing off): coordinate on the next owner the primary's breaker view
        allows — what the cluster did before fencing, and why two shards could mint one version."""
        topo = self.topology
        first = writes[0]
        for owner in topo.owners(first.collection, first.key):
            if owner == primary_id:
                continue
            if owner == topo.self_id:
                return await self.commit_here(writes, concern)
            log.warning("UNSAFE: primary %s unreachable; trying owner %s", primary_id, owner)
            try:
                reply = await self.executor.request(
                    owner,
                    "POST",
                    "/internal/commit",
                    json_body=commit_body(writes, topo.epoch, concern),
                    idempotent=False,
                    retries=0,
                )
            except PeerUnavailable as exc:
                raise forward_failure(owner, f"{first.collection}/{first.key}", exc) from None
            except PeerError as exc:
                raise relay(exc) from None
            return [change_from_json(c) for c in reply["changes"]]
        raise Unavailable(
            f"no owner of {first.collection}/{first.key} could coordinate", code="owners_unavailable"
        )

    async def commit_batch(
        self, writes: list[Write], concern: WriteConcern = DEFAULT_CONCERN
    ) -> list[Change]:
        """A batch: atomic per set of owners, the sets in parallel, results in input order."""
        topo = self.topology
        if not topo.clustered:
            return await self.commit_here(writes, concern)
        groups = owner_groups(writes, topo)
        results = await asyncio.gather(*(self.commit(group, concern) for group in groups.values()))
        changes = {(c.collection, c.key): c for group in results for c in group}
        return [changes[(w.collection, w.key)] for w in writes]

    async def commit_forwarded(
        self, writes: list[Write], epoch: int, concern: WriteConcern, checks: list[Check] | None = None
    ) -> list[Change]:
        """A write forwarded by another shard: coordinate it only as the keys' primary in ``epoch``."""
        checks = checks or []
        refusal = self.fence_refusal(
            epoch,
            self.topology.self_id,
            [(w.collection, w.key) for w in writes] + [(c.collection, c.key) for c in checks],
        )
        if refusal is not None:
            raise refusal
        return await self.commit_here(writes, concern, checks)

    async def commit_here(
        self, writes: list[Write], concern: WriteConcern = DEFAULT_CONCERN, checks: list[Check] | None = None
    ) -> list[Change]:
        """Coordinate locally: replicate the stamped records, then install and acknowledge."""
        checks = checks or []
        self.store.health.check()  # 507 before anything is sent while this disk refuses writes
        topo = self.topology
        if self.handoff is not None and self.handoff.handoff_active:
            for w in writes:  # keys not handed off yet: continue from their newest version
                if self.store.version(w.collection, w.key) == 0:
                    await self.handoff.fetch_previous(w.collection, w.key)
        if not topo.clustered:
            return await self.store.commit_async(writes, None, checks)
        keys = [(w.collection, w.key) for w in writes] + [(c.collection, c.key) for c in checks]
        refused = lease_refusal(topo, self.lease) or floor_refusal(topo, concern, keys)
        if refused is not None and self.fencing:
            raise refused
        async with self.locks.hold(keys):
            self._refuse_held(keys)
            # Inline: validation and stamping under the store's lock take microseconds, and a
            # hop to a worker thread costs more than that (a GIL handoff) on a busy shard.
            records, previous = self.store.prepare_with_previous(writes, checks)
            if not records:  # checks only: validated under the locks, nothing to write
                return []
            # The burns, should this fail, take the documents the records were prepared on (a
            # repair may install the record itself here while its replication is in flight, and
            # one may be staged, not yet durable, as it is prepared).
            burns = self._burns_of(topo, records, previous)
            return await self._replicate_and_install(topo, records, concern, burns)

    def _refuse_held(self, keys: list[tuple[str, str]]) -> None:
        """409 when a prepared cross-shard transaction holds one of ``keys`` (no waiting: the
        lock lasts one commit round trip, and a wait could not be bounded by this shard)."""
        held = self.held.holders(keys) if self.held is not None else {}
        if held:
            (collection, key), txn = next(iter(held.items()))
            raise Conflict(
                f"{collection}/{key} is locked by transaction {txn}, which is being committed; retry",
                code="transaction_in_progress",
            )

    async def _replicate_and_install(
        self, topo: Topology, records: list[Replicated], concern: WriteConcern, burns: list[Replicated]
    ) -> list[Change]:
        per_peer = by_peer(topo, records, lambda c, k: write_owners(topo, c, k))
        lagging = by_peer(
            topo, records, lambda c, k: [o for o in topo.owners(c, k) if o not in topo.in_sync(c, k)]
        )
        if concern is WriteConcern.ONE:
            changes = await self._install_then_replicate(records, per_peer, burns)
            for peer, missed in lagging.items():  # out of sync: they catch up before rejoining
                await after_commit("hint", self.replication.hint(peer, missed))
            return changes
        peers = sorted(per_peer)
        logged: bytes | None = None
        entry: asyncio.Future[bytes] | None = None
        if self.inflight is not None and peers:  # this copy's durability: see storage/inflight.py
            if len(records) > 1 and len(peers) > 1:  # in several messages: logged before any leaves
                logged = await self.inflight.add_async(records, burns)
            elif self._replicating == 0 and self.store.commits_idle:
                # One message, and no other write here to share an fsync with: log the records
                # while they travel, so this copy's fsync overlaps the owners'. With company the
                # install joins a group commit instead (an entry there would only add work).
                entry = asyncio.ensure_future(self.inflight.add_async(records, burns))
        self._replicating += 1
        try:
            if len(peers) == 1:  # RAID1: no gather (its task would add turns of the loop per write)
                answers = [await self._deliver_while_in_sync(topo, peers[0], per_peer[peers[0]])]
            else:
                answers = await asyncio.gather(
                    *(self._deliver_while_in_sync(topo, p, per_peer[p]) for p in peers)
                )
        finally:
            self._replicating -= 1
            if entry is not None:
                logged = await self._entry_written(entry)
        delivered = {peer: outcome for peer, (outcome, _) in zip(peers, answers, strict=True)}
        newer = [r for _, found in answers for r in found]
        if newer:  # an owner was ahead of this coordinator: catch up first (the retry writes on top)
            await self.store.apply_replicated_async(newer)  # group commit: the loop runs meanwhile
        outcomes = {
            (r.collection, r.key): decide(
                [delivered[o] for o in write_owners(topo, r.collection, r.key) if o != topo.self_id],
                required_acks(concern, len(write_owners(topo, r.collection, r.key))),
            )
            for r in records
        }
        if not newer and all(o is Outcome.COMMIT for o in outcomes.values()):
            try:
                # with an entry, the records are durable here already: no fsync of its own, and
                # the entry goes in the same write
                changes = await self.store.apply_replicated_async(
                    records,
                    synced=logged is None,
                    also=None if logged is None else self.inflight.dropping(logged),
                )
            except (InsufficientStorage, Unavailable) as exc:
                if exc.code not in STORAGE_CODES:
                    raise
                return await self._install_refused(topo, records, concern, delivered, burns, exc, logged)
            if len(changes) != len(records):  # a repair got here first: with these records, or newer
                held_elsewhere = {(r.collection, r.key) for r in records if holders(topo, r, delivered)}
                changes = self._installed(records, changes, burns, held_elsewhere)
            if changes is None:
                raise Conflict(
                    "the document changed while this write was replicated", code="version_conflict"
                )
            for peer in peers:  # owners that missed a write acknowledged at a lower concern
                if delivered[peer] is not Delivery.HELD:
                    await after_commit("hint", self.replication.hint(peer, per_peer[peer]))
            for peer, missed in lagging.items():  # out of sync: they catch up before rejoining
                await after_commit("hint", self.replication.hint(peer, missed))
            return changes
        burned = await self._burn(topo, records, delivered, burns)
        if logged is not None and not await self._dropped_durably(logged):
            raise Unavailable(
                "the write could not be completed, and this shard's disk refused to record that it "
                "was not: the write may or may not be applied; read the document before retrying",
                code="write_outcome_unknown",
            )
        clean = not any(d in (Delivery.HELD, Delivery.UNKNOWN) for d in delivered.values())
        fenced = any(d is Delivery.FENCED for d in delivered.values())
        if burned is Burned.NOTHING and (newer or (clean and (fenced or self._moving()))):
            raise Unavailable(
                "the key's owners are changing (a plan change is spreading or a new owner is still "
                "starting); nothing was written",
                code="epoch_changed",
            )
        held = min(1 + len(holders(topo, r, delivered)) for r in records)
        short = (
            f"only {held} of the key's in-sync owners could take this write and w={concern.value} needs "
            f"{max(required_acks(concern, len(write_owners(topo, r.collection, r.key))) for r in records)}"
        )
        raise burn_failure(short, burned, burns)

    async def _entry_written(self, entry: asyncio.Future[bytes]) -> bytes | None:
        """The in-flight entry's key, or None when this disk refused it (the install is then
        synced itself, and refused the same way)."""
        try:
            return await entry
        except (InsufficientStorage, Unavailable) as exc:
            if exc.code not in STORAGE_CODES:
                raise
            return None

    async def _dropped_durably(self, logged: bytes) -> bool:
        """Before a failure is answered: recovery must never roll this write forward."""
        try:
            await self.inflight.drop_durably(logged)
        except (InsufficientStorage, Unavailable) as exc:
            if exc.code not in STORAGE_CODES:
                raise
            return False
        return True

    async def _deliver_while_in_sync(
        self, topo: Topology, peer: str, items: list[Replicated]
    ) -> tuple[Delivery, list[Replicated]]:
        """Deliver a coordinated write to ``peer``, but stop waiting once a newer plan takes it
        out of the in-sync set (a paused owner would hold the key until the request timeout):
        its answer no longer decides, and it may have applied the write, so it counts as
        UNKNOWN (the write is burned; catch-up replaces its copy before it serves again)."""
        return await self.replication.deliver(
            peer, items, topo.epoch, topo.self_id, self._fenced_watch(topo, peer)
        )

    def _fenced_watch(self, topo: Topology, peer: str) -> Watch | None:
        """For a wait on ``peer``'s answer: fail it with PeerUnavailable (reason
        :data:`OUT_OF_SYNC`) once a newer plan takes ``peer`` out of the in-sync set (None:
        nothing fences a shard). A callback on the plan's change, not a task per write."""
        if getattr(self._plan, "next_change", None) is None or topo.plan.failover is None:
            return None
        plan = cast(ChangingTopology, self._plan)

        def watch(answer: asyncio.Future) -> Callable[[], None]:
            def fenced() -> None:
                if not answer.done():
                    log.warning("stopped waiting for %s: a newer plan took it out of the in-sync set", peer)
                    answer.set_exception(
                        PeerUnavailable(peer, OUT_OF_SYNC, "a newer plan took it out of the in-sync set")
                    )

            return InSyncWatch(plan, peer, fenced).stop

        return watch

    async def _while_in_sync(self, topo: Topology, peer: str, call: Awaitable[Any]) -> Any:
        """``call``'s answer from ``peer``, unless a newer plan takes ``peer`` out of the
        in-sync set first: a paused or cut-off shard would otherwise hold the request until the
        request timeout, long after the plan authority fenced it. Then PeerUnavailable
        (reason :data:`OUT_OF_SYNC`): the call was sent, so what it did there is not known."""
        watch = self._fenced_watch(topo, peer)
        if watch is None:  # nothing fences a shard: just wait
            return await call
        request = asyncio.ensure_future(call)
        fenced: asyncio.Future = asyncio.get_running_loop().create_future()
        stop = watch(fenced)
        try:
            await first_done(request, fenced)
        finally:
            stop()
        if request.done():
            if fenced.done():
                fenced.exception()  # fenced in the same turn: the answer came, and decides
            return request.result()
        request.add_done_callback(_retrieve)
        return fenced.result()  # raises its PeerUnavailable (OUT_OF_SYNC)

    async def _install_then_replicate(
        self, records: list[Replicated], per_peer: dict[str, list[Replicated]], burns: list[Replicated]
    ) -> list[Change]:
        """w=1 means what it says: acknowledged once this coordinator's copy is durable. The
        other owners get the records in the background, as repairs (stamps order them), and a
        durable hint when they cannot take them now; anti-entropy covers a crash in between."""
        changes = await self.store.apply_replicated_async(records)
        if len(changes) != len(records):  # a repair got here first: with these records, or newer
            changes = self._installed(records, changes, burns)
        if changes is None:
            raise Conflict("the document changed while this write was replicated", code="version_conflict")
        for peer, items in per_peer.items():
            self.replication.send_later(peer, items)
        return changes

    async def settle(self) -> None:
        """Until the w=1 replication started so far has been delivered or hinted."""
        await self.replication.settle()

    async def _install_refused(
        self,
        topo: Topology,
        records: list[Replicated],
        concern: WriteConcern,
        delivered: dict[str, Delivery],
        burns: list[Replicated],
        refused: ThemisError,
        logged: bytes | None = None,
    ) -> list[Change]:
        """This disk refused a write the other owners took. Enough of them for the concern: it
        is applied (this copy is repaired by anti-entropy once the disk takes writes). Too few:
        it is undone on them (the burn, sent from here) and the answer is this disk's refusal,
        nothing written; an owner that cannot be told leaves the outcome unknown."""
        held = {(r.collection, r.key): holders(topo, r, delivered) for r in records}
        need = {
            (r.collection, r.key): required_acks(concern, len(write_owners(topo, r.collection, r.key)))
            for r in records
        }
        if all(len(owners) >= need[ck] for ck, owners in held.items()):
            log.warning("write held by enough in-sync owners but refused by this disk: %s", refused.message)
            return [
                Change(
                    r.collection,
                    r.key,
                    r.version,
                    r.document,
                    b.version - 2 if b.document else 0,
                    r.hlc,
                    r.origin,
                )
                for r, b in zip(records, burns, strict=True)
            ]
        per_peer: dict[str, list[Replicated]] = {}
        for b in burns:
            for owner in held[(b.collection, b.key)]:
                per_peer.setdefault(owner, []).append(b)
        try:
            await asyncio.gather(
                *(self.replication.push(p, [items], retries=1) for p, items in per_peer.items())
            )
        except (PeerUnavailable, PeerError) as exc:
            raise Unavailable(
                f"{refused.message.replace('; nothing was written', '')}, after {exc.peer} took the "
                "write and could not be told to undo it: the write may or may not be applied; read the "
                "document before retrying",
                code="write_outcome_unknown",
            ) from None
        if logged is not None and not await self._dropped_durably(logged):
            raise Unavailable(
                f"{refused.message.replace('; nothing was written', '')}, after the write was logged "
                "here: the write may or may not be applied; read the document before retrying",
                code="write_outcome_unknown",
            )
        raise refused

    def _installed(
        self,
        records: list[Replicated],
        changes: list[Change],
        burns: list[Replicated],
        held_elsewhere: Collection[tuple[str, str]] = (),
    ) -> list[Change] | None:
        """The changes of ``records`` when every one is applied: installed here, by this write
        or by a repair (anti-entropy, a read-through) that carried the very record, or — for a
        record another owner acknowledged holding (``held_elsewhere``) — overtaken here by a
        higher version, which that owner wrote on top of it (its primary now, after a
        failover). None when a record was not applied: a newer record of the same or a lower
        version got in first, or one of a higher version when no other owner holds this one."""
        done = {(c.collection, c.key): c for c in changes}
        held = self.store.stamps([(r.collection, r.key) for r in records])
        out = []
        for r, stamp, burn in zip(records, held, burns, strict=True):
            overtaken = (
                stamp is not None and stamp.version > r.version and (r.collection, r.key) in held_elsewhere
            )
            if (r.collection, r.key) in done:
                out.append(done[(r.collection, r.key)])
            elif stamp == r.stamp or overtaken:
                previous = burn.version - 2 if burn.document is not None else 0
                out.append(Change(r.collection, r.key, r.version, r.document, previous, r.hlc, r.origin))
            else:
                return None
        return out

    async def _burn(
        self,
        topo: Topology,
        records: list[Replicated],
        delivered: dict[str, Delivery],
        burns: list[Replicated],
    ) -> Burned:
        """After a failed write that some owner may hold: install the previous document again,
        everywhere, one version above the failed record, so the failed record never wins. A
        version of its own, not the failed record's with a later stamp: a client may have read
        the failed record from an owner that took it, and its ``If-Match`` on that version
        must be refused, not applied on top of a document that never committed."""
        maybe: set[str] = set()
        newest: dict[tuple[str, str], Replicated] = {}
        for r in records:
            owners = [o for o in write_owners(topo, r.collection, r.key) if o != topo.self_id]
            took = [o for o in owners if delivered.get(o) in (Delivery.HELD, Delivery.UNKNOWN)]
            if took:
                newest[(r.collection, r.key)] = r
                maybe.update(took)
        if not newest:
            return Burned.NOTHING
        burns = [b for b in burns if (b.collection, b.key) in newest]
        await self.store.apply_replicated_async(burns)
        log.warning("write to %d key(s) failed after an owner may have taken it; burned it", len(burns))
        # An owner out of sync now needs no burn: catch-up replaces its copies with the in-sync
        # owners' (the burn among them) before it serves again, so it cannot serve the record.
        fenced = set(self.topology.plan.out_of_sync)
        reached = await self.replicate_repairs(burns, skip=fenced)
        # Until every owner that may hold the failed record holds the burn, a failover to one
        # of them could still serve the failed record: the client must not be told it failed.
        return Burned.EVERYWHERE if maybe <= reached | fenced else Burned.PARTLY

    def _burns_of(
        self, topo: Topology, records: list[Replicated], previous: list[dict[str, Any] | None]
    ) -> list[Replicated]:
        """For each record, the document it replaces again one version above it, stamped now."""
        return [
            Replicated(r.collection, r.key, r.version + 1, before, self.store.clock.now(), topo.self_id)
            for r, before in zip(records, previous, strict=True)
        ]

    async def recover_inflight(self) -> list[Replicated]:
        """At start-up, before serving: roll forward the writes a crash left in flight
        (``storage/inflight.py``) here, and answer the records their other owners still need
        (sent by the caller in the background; anti-entropy would deliver them too)."""
        if self.inflight is None:
            return []
        entries = await run_in_threadpool(self.inflight.entries)
        send: list[Replicated] = []
        if not self.topology.in_sync_self:
            # Fenced while it was down: its keys' in-sync owners decide what these writes
            # became (a new primary may have served or overwritten them); catch-up takes theirs.
            for logged, _, _ in entries:
                await run_in_threadpool(self.inflight.remove, logged)
            return send
        for logged, records, burns in entries:
            keys = [(r.collection, r.key) for r in records]
            # a no-op for each key this shard holds the record of, or anything newer (a burn)
            await run_in_threadpool(self.store.apply_replicated, records)
            held = self.store.stamps(keys)
            send += [b if h == b.stamp else r for r, b, h in zip(records, burns, held, strict=True)]
            await run_in_threadpool(self.inflight.remove, logged)
            log.warning(
                "recovered a write to %d key(s) left in flight by a crash: rolled forward, sent to its "
                "owners again",
                len(records),
            )
        return send

    async def replicate_repairs(self, items: list[Replicated], skip: Collection[str] = ()) -> set[str]:
        """Send records to their other owners (but ``skip``) now, or as hints (stamps decide on
        arrival); answers the owners that took them now."""
        topo = self.topology
        per_peer = {p: b for p, b in by_peer(topo, items, topo.owners).items() if p not in skip}
        sent = await asyncio.gather(*(self.replication.send(peer, batch) for peer, batch in per_peer.items()))
        return {peer for peer, ok in zip(per_peer, sent, strict=True) if ok}

    async def local_entry(self, collection: str, key: str, epoch: int | None) -> Any:
        """This shard's record of a key for a read-through during a handoff: refused (409
        ``epoch_behind``) until this shard runs ``epoch`` too, and taken after any write to the
        key it is coordinating, so no write of the old epoch can land after the answer."""
        if epoch is not None and self.topology.version < epoch:
            raise Conflict(
                f"this shard is at epoch {self.topology.version}, not yet {epoch}", code="epoch_behind"
            )
        async with self.locks.hold([(collection, key)]):
            return self.store.get_entry(collection, key)

    # -- reads -------------------------------------------------------------------------------
    async def get(self, collection: str, key: str) -> StoredDocument:
        try:
            return await self._get(collection, key)
        except NotFound:
            if self.handoff is None or not self.handoff.handoff_active:
                raise
            return await self._get_previous(collection, key)

    async def _get_previous(self, collection: str, key: str) -> StoredDocument:
        """During a handoff a key may still live only on its previous owners."""
        previous = self.handoff.previous_ring()
        topo = self.topology
        for owner in candidates(previous.owners(urn(collection, key), topo.plan.copies), self._down()):
            if owner == topo.self_id or owner not in topo.members:
                continue
            try:
                reply = await self.executor.request(
                    owner, "GET", internal_path("documents", collection, key), retries=0, timeout_s=5
                )
                return StoredDocument(collection, key, int(reply["version"]), reply["document"])
            except (PeerUnavailable, PeerError):
                continue
        raise NotFound(f"document {collection}/{key} does not exist", code="document_not_found")

    async def _get(self, collection: str, key: str) -> StoredDocument:
        """The key's primary answers (linearizable: it installs a write only once it is
        committed, and answers only while it is the primary of the current epoch and holds its
        lease); with ``read_from_replicas`` any owner does."""
        topo = self.topology
        if not topo.clustered:
            return self._found(collection, key, self.store.get(collection, key))
        if self.read_from_replicas:
            return await self._get_any_owner(collection, key)
        delay, deadline = 0.05, asyncio.get_running_loop().time() + READ_RETRY_S
        while True:  # another epoch or a lapsed lease: retried while the plan spreads
            try:
                return await self._get_primary(collection, key)
            except Unavailable as exc:
                if exc.code != "epoch_changed" or asyncio.get_running_loop().time() + delay > deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)

    def primary_read(self, collection: str, key: str, epoch: int) -> StoredDocument | None:
        """This shard's copy, served as the key's primary: refused (409 ``not_coordinator``)
        when this shard's plan does not make it that, 503 when its lease lapsed. The reader's
        ``epoch`` may differ from ours while a plan spreads: what matters is that we are the
        primary in our epoch and, with failover, hold the lease the authority outlives before
        it moves the key (``replication/lease.py``); a handoff's new primary reads through
        before it writes."""
        topo = self.topology
        if self.fencing:
            coordinator = primary(topo, collection, key) if topo.in_sync_self else None
            if coordinator != topo.self_id:
                raise Conflict(
                    f"{topo.self_id} is not the primary of {collection}/{key} in epoch {topo.epoch} "
                    f"(the reader is at {epoch}; {coordinator or 'another owner'} is)",
                    code="not_coordinator",
                )
            lapsed = lease_refusal(topo, self.lease)
            if lapsed is not None:
                raise lapsed
        return self.store.get(collection, key)

    @staticmethod
    def _found(collection: str, key: str, doc: StoredDocument | None) -> StoredDocument:
        if doc is None:
            raise NotFound(f"document {collection}/{key} does not exist", code="document_not_found")
        return doc

    async def _get_primary(self, collection: str, key: str) -> StoredDocument:
        topo = self.topology
        target = primary(topo, collection, key)
        changing = "the key's primary is changing; nothing was read"
        try:
            if target == topo.self_id:
                return self._found(collection, key, self.primary_read(collection, key, topo.epoch))
            await self.executor.revive_or_refuse(target)  # only the primary may answer
            reply = await self._while_in_sync(
                topo,
                target,
                self.executor.request(
                    target,
                    "GET",
                    internal_path("documents", collection, key),
                    params={"primary_epoch": str(topo.epoch)},
                    idempotent=True,
                    retries=1,  # a read may be sent again: a torn keep-alive connection is no answer
                ),
            )
        except Conflict as exc:  # this shard's own fence
            raise Unavailable(f"{changing} ({exc})", code="epoch_changed") from None
        except PeerUnavailable as exc:
            if exc.code in RETRY_READ_CODES or exc.reason == OUT_OF_SYNC:
                raise Unavailable(f"{changing} ({exc.message})", code="epoch_changed") from None
            if self._moving() and (exc.reason in NOT_SENT_REASONS or exc.code == "starting"):
                # A new owner of a handoff not serving yet has written nothing: its keys are
                # still where the previous ring put them (the handoff's read-through).
                return await self._get_previous(collection, key)
            raise Unavailable(
                f"the primary of {collection}/{key} ({target}) is unreachable ({exc.reason}); its keys "
                "are readable again once the plan authority fails them over to an in-sync copy",
                code="primary_unavailable",
            ) from None
        except PeerError as exc:
            if exc.status == 404:
                raise NotFound(
                    f"document {collection}/{key} does not exist", code="document_not_found"
                ) from None
            if getattr(exc, "code", None) in FENCE_CODES:
                raise Unavailable(f"{changing} ({exc.message})", code="epoch_changed") from None
            raise relay(exc) from None
        return StoredDocument(collection, key, int(reply["version"]), reply["document"])

    async def _get_any_owner(self, collection: str, key: str) -> StoredDocument:
        """First owner that has it (``read_from_replicas``: available, not linearizable). An
        owner answering 404 does not end the search: a replica can hold a version whose
        delivery to that owner is still a pending hint."""
        topo = self.topology
        order = candidates(topo.owners(collection, key), self._down())
        reached = False
        for target in order:
            if target == topo.self_id:
                reached = True
                doc = self.store.get(collection, key)
                if doc is not None:
                    return doc
                continue
            try:
                reply = await self.executor.request(
                    target, "GET", internal_path("documents", collection, key), retries=0
                )
                return StoredDocument(collection, key, int(reply["version"]), reply["document"])
            except PeerUnavailable as exc:
                log.info("owner %s unavailable for a read (%s); trying the next", target, exc.reason)
            except PeerError as exc:
                if exc.status != 404:
                    raise relay(exc) from None
                reached = True
        if reached:
            raise NotFound(f"document {collection}/{key} does not exist", code="document_not_found")
        raise Unavailable(f"no owner of {collection}/{key} is reachable", code="owners_unavailable")
