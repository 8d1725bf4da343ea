"""The pure part of two-phase commit: who takes part, what the coordinator decides, what it
answers a participant that asks, which intents are in doubt, and which error the client sees."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ...errors import ThemisError, Unavailable
from ...storage.documents import Check, Write
from ...storage.intents import Decision, Intent
from ..placement.owners import Topology, same_owners
from ..replication.fencing import FENCE_CODES, Delivery


class Outcome(StrEnum):
    """What a client is told about its transaction id (``GET /v1/transactions/{id}``)."""

    COMMITTED = "committed"
    ABORTED = "aborted"
    IN_PROGRESS = "in_progress"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Status:
    """One shard's knowledge of a transaction: its log entry (a final decision, a fence, or
    none), whether it is coordinating it right now, and whether it holds an intent of it.
    Asked about a client's id, the shard adds the same for each attempt at it it knows
    (``attempts``, by name); the fields then are the bare id's own."""

    decision: Decision | None = None
    running: bool = False
    prepared: bool = False
    attempts: Mapping[str, Status] = field(default_factory=dict)

    def as_json(self) -> dict:
        out: dict = {
            "decision": self.decision.value if self.decision else None,
            "running": self.running,
            "prepared": self.prepared,
        }
        if self.attempts:
            out["attempts"] = {name: s.as_json() for name, s in self.attempts.items()}
        return out

    @classmethod
    def from_json(cls, d: dict) -> Status:
        raw = d.get("decision")
        attempts = {str(n): cls.from_json(a) for n, a in (d.get("attempts") or {}).items()}
        return cls(Decision(raw) if raw else None, bool(d.get("running")), bool(d.get("prepared")), attempts)

    @property
    def knows(self) -> bool:
        """A decision, a run or an intent here (a fence alone is no attempt's)."""
        return (self.decision is not None and self.decision.final) or self.running or self.prepared


@dataclass
class Group:
    """One participant's share of a transaction: its writes and checks, and where each write
    sits in the client's list (so results come back in input order)."""

    writes: list[Write] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)


def participant_groups(
    writes: Sequence[Write], checks: Sequence[Check], topology: Topology
) -> dict[str, Group]:
    """Writes and checks grouped by their keys' primary in this epoch (the participants)."""
    groups: dict[str, Group] = {}
    for i, w in enumerate(writes):
        g = groups.setdefault(topology.owners(w.collection, w.key)[0], Group())
        g.writes.append(w)
        g.positions.append(i)
    for c in checks:
        groups.setdefault(topology.owners(c.collection, c.key)[0], Group()).checks.append(c)
    return groups


def kind(keys: Iterable[tuple[str, str]], topology: Topology) -> str:
    """``single`` when one shard coordinates every key and every key has the same owners (the
    fast path: one message per owner, each applied atomically), else ``cross`` (two-phase
    commit). Keys that share a primary but not their other owners are ``cross`` too: their
    owners would take their parts in separate messages, and a coordinator that dies between
    them, followed by a failover that fences it, would leave one part served as committed and
    the other never applied; prepared intents and their termination protocol cannot."""
    if not topology.clustered:
        return "single"
    return "single" if same_owners(keys, topology) else "cross"


def coordinator_decision(prepared: Iterable[bool]) -> Decision:
    """Commit only when every participant prepared; anything else (a refusal, a timeout, an
    unreachable participant) aborts."""
    return Decision.COMMIT if all(prepared) else Decision.ABORT


def deciders(
    coordinator: str, participants: Iterable[str], keys: Iterable[tuple[str, str]], topology: Topology
) -> tuple[str, ...]:
    """The shards that may hold a transaction's final COMMIT: its participants, then every other
    owner of its keys, never the coordinator (whose loss this protects against) — unless no
    other shard takes part at all (one shard, or copies=1 on the coordinator alone)."""
    first = sorted(set(participants) - {coordinator})
    rest = sorted({o for c, k in keys for o in topology.owners(c, k)} - set(first) - {coordinator})
    return tuple(first + rest) or (coordinator,)


def termination(fenced: Mapping[str, Status | None], decider_ids: Sequence[str]) -> Decision | None:
    """The decision a terminator reaches from every decider's answer to a fence (None: no
    answer). A COMMIT anywhere was made final by the coordinator; an ABORT anywhere was reached
    by someone before; once every decider is fenced no COMMIT can ever be logged, so it is
    ABORT; otherwise (a decider did not answer, or is the coordinator and still running) it
    waits."""
    known = [s for s in fenced.values() if s is not None]
    if any(s.decision is Decision.COMMIT for s in known):
        return Decision.COMMIT
    if any(s.decision is Decision.ABORT for s in known):
        return Decision.ABORT
    if all(fenced.get(d) is not None and fenced[d].decision is Decision.FENCED for d in decider_ids):
        return Decision.ABORT
    return None


def outcome(statuses: Mapping[str, Status | None]) -> Outcome:
    """What the cluster's answers (None: a shard that did not answer) tell a client: a decision
    anywhere is final; a shard coordinating or holding an intent means it is in progress."""
    known = [s for s in statuses.values() if s is not None]
    if any(s.decision is Decision.COMMIT for s in known):
        return Outcome.COMMITTED
    if any(s.decision is Decision.ABORT for s in known):
        return Outcome.ABORTED
    if any(s.running or s.prepared for s in known):
        return Outcome.IN_PROGRESS
    return Outcome.UNKNOWN


def outcome_after_fence(fenced: Mapping[str, Status | None], copies: int) -> Outcome:
    """The answer once every shard was asked to fence a transaction nobody knew. With every
    shard but at most one fenced, it can never commit: if the silent one coordinates it, all
    its deciders are fenced; if not, its coordinator answered and runs nothing (a later start
    finds the fence). So it is aborted, definitely, unless someone decided or runs it. (With one
    copy a coordinator may be its own only decider: then everyone must answer.)"""
    known = [s for s in fenced.values() if s is not None]
    decided = outcome(fenced)
    if decided is not Outcome.UNKNOWN and decided is not Outcome.IN_PROGRESS:
        return decided
    if any(s.running for s in known):
        return Outcome.IN_PROGRESS
    if len(fenced) - len(known) <= (1 if copies > 1 else 0) and all(s.decision is not None for s in known):
        return Outcome.ABORTED
    return Outcome.UNKNOWN


def attempt_views(statuses: Mapping[str, Status | None], txn_id: str) -> dict[str, dict[str, Status | None]]:
    """Each attempt's statuses by shard, from every shard's answer about a client's id. An
    attempt a shard does not know is, there, what the bare id's entry says of every attempt:
    fenced when the id is (its ``accept`` fences any attempt then), else nothing. The bare id
    is an attempt of its own where some shard knows it (an older version's transaction), or
    where no attempt is known at all."""
    names = sorted({n for s in statuses.values() if s is not None for n in s.attempts})
    if not names or any(s is not None and s.knows for s in statuses.values()):
        names.insert(0, txn_id)

    def seen(s: Status | None, name: str) -> Status | None:
        if s is None:
            return None
        if name == txn_id:
            return Status(s.decision, s.running, s.prepared)
        return s.attempts.get(name) or Status(Decision.FENCED if s.decision is Decision.FENCED else None)

    return {name: {shard: seen(s, name) for shard, s in statuses.items()} for name in names}


def combined(outcomes: Iterable[Outcome]) -> Outcome:
    """A client's id from its attempts' outcomes: committed if one committed (an id commits at
    most one attempt where its deciders meet), in progress while one may still commit,
    aborted once every one is, else unknown."""
    found = set(outcomes)
    for o in (Outcome.COMMITTED, Outcome.IN_PROGRESS, Outcome.UNKNOWN):
        if o in found:
            return o
    return Outcome.ABORTED if found else Outcome.UNKNOWN


def id_outcome(statuses: Mapping[str, Status | None], txn_id: str) -> Outcome:
    """What the shards' answers about a client's id tell the client (``outcome`` per attempt)."""
    return combined(outcome(v) for v in attempt_views(statuses, txn_id).values())


def id_outcome_after_fence(statuses: Mapping[str, Status | None], txn_id: str, copies: int) -> Outcome:
    """The same once every shard was asked to fence the id (``outcome_after_fence`` per attempt)."""
    return combined(outcome_after_fence(v, copies) for v in attempt_views(statuses, txn_id).values())


def in_doubt(intent: Intent, now_ms: int, after_s: float) -> bool:
    """Is this intent old enough that its participant should ask about it?"""
    return now_ms - intent.created_ms >= after_s * 1000


def enough_copies(
    keys: Iterable[tuple[str, str]], topology: Topology, delivered: Mapping[str, Delivery], need: int
) -> bool:
    """Does every written key have ``need`` durable copies of its intent (this shard's included)?"""
    for collection, key in keys:
        held = 1 + sum(
            delivered.get(o) is Delivery.HELD
            for o in topology.owners(collection, key)
            if o != topology.self_id
        )
        if held < need:
            return False
    return True


def client_error(errors: Sequence[BaseException]) -> BaseException:
    """The one error an aborted transaction reports: a participant's 4xx refusal (a failed
    condition: the client's to fix) before an epoch change (retried by the caller) before a 503."""

    def rank(e: BaseException) -> int:
        if isinstance(e, ThemisError) and e.status < 500 and e.code not in FENCE_CODES:
            return 0
        if isinstance(e, Unavailable) and e.code == "epoch_changed":
            return 1
        return 2 if isinstance(e, ThemisError) else 3

    return min(errors, key=rank)
