"""The pure part of two-phase commit: who takes part, what the coordinator decides, what it
answers a participant that asks, which intents are in doubt, and which error the client sees."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ...errors import ThemisError, Unavailable
from ...storage.documents import Check, Write
from ...storage.intents import Decision, Intent
from ..fencing import FENCE_CODES, Delivery
from ..placement import Topology


class Answer(StrEnum):
    """What a coordinator tells a participant about a transaction."""

    COMMIT = "commit"
    ABORT = "abort"
    PENDING = "pending"  # still running here, within its timeout: ask again later


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
    """``single`` when one shard coordinates every key (the fast path), else ``cross``."""
    if not topology.clustered:
        return "single"
    return "single" if len({topology.owners(c, k)[0] for c, k in keys}) <= 1 else "cross"


def coordinator_decision(prepared: Iterable[bool]) -> Decision:
    """Commit only when every participant prepared; anything else (a refusal, a timeout, an
    unreachable participant) aborts."""
    return Decision.COMMIT if all(prepared) else Decision.ABORT


def answer_for(
    logged: Decision | None, started_s: float | None, now_s: float, timeout_s: float
) -> Answer | None:
    """The coordinator's answer to "what became of this transaction?".

    A logged decision is final. A transaction still running here within its timeout is pending.
    Anything else — unknown here (never started, or started before a restart), or past its
    timeout — is presumed aborted: None tells the caller to log ABORT (first decision wins, so a
    COMMIT logged in the meantime still stands) and answer what was logged."""
    if logged is not None:
        return Answer(logged.value)
    if started_s is not None and now_s - started_s < timeout_s:
        return Answer.PENDING
    return None


def in_doubt(intent: Intent, now_ms: int, after_s: float) -> bool:
    """Is this intent old enough that its participant should ask the coordinator about it?"""
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
