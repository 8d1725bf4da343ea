"""Gossip state: membership + heartbeats, per-shard load, adapter capability announcements.

Pure data and merge rules, no I/O and no clocks of its own: every method that needs the time
takes it (``now`` = local monotonic seconds for failure detection, ``now_wall`` = Unix seconds
for announcement staleness, since ``announced_at`` is compared across machines).

Anti-entropy (Demers et al. 1987), Scuttlebutt-style push-pull in three messages (signed and
validated on the wire by ``gossip_wire``):

    A → B  SYN   A's digest (versions only)
    B → A  ACK   entries B has that are newer than A's digest  +  keys where A is newer (wants)
    A → B  PUSH  A's entries for B's wants

Merge rules (commutative, associative, idempotent — so any exchange order converges):

* a member record wins by ``(incarnation, heartbeat)``; a shard bumps its heartbeat every round
  and carries its load stats (``pending_llm_requests``, ``avg_llm_queue_ms``,
  ``active_lora_adapters`` — the paper's ShardStats additions) in the same record, so load is
  versioned by the heartbeat. A restarted shard uses a higher incarnation, and a shard that
  hears of a newer version of itself refutes it by bumping its incarnation.
* an announcement, keyed ``(shard_id, adapter_id)``, wins by ``(federation_round, announced_at)``;
  announcements older than the TTL (7200 s) are evicted and refused, and so are ones stamped
  beyond the allowed clock skew in the future.

Failure detection is local (gossip-style, van Renesse et al.): a member whose version has not
advanced for ``suspect_timeout_s`` is *suspect*, after ``dead_timeout_s`` *dead*. Dead members
stay in the table (so stale gossip cannot resurrect them) until the plan removes them.

Each section keeps an order-independent fingerprint (XOR of per-entry hashes); when two
states' fingerprints agree the section is skipped without comparing entries — announcements
change rarely while heartbeats change every round, so this keeps exchanges cheap.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from ..routing.router import Capability

ShardId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")]
AdapterId = Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[^\s]+$")]
Domain = Annotated[str, StringConstraints(min_length=1, max_length=64, strip_whitespace=True, to_lower=True)]

MemberVersion = tuple[int, int]  # (incarnation, heartbeat)
AnnouncementVersion = tuple[int, float]  # (federation_round, announced_at)


class MemberStatus(StrEnum):
    ALIVE = "alive"
    SUSPECT = "suspect"
    DEAD = "dead"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ShardLoad(_Record):
    """The LLM queue figures a shard publishes with every heartbeat (paper: ShardStats)."""

    pending_llm_requests: int = Field(0, ge=0)
    avg_llm_queue_ms: float = Field(0.0, ge=0)
    active_lora_adapters: int = Field(0, ge=0)
    #: sha256 of the model this shard drafts for at ``/internal/draft`` ("" = serves no drafts):
    #: verify shards with that model pick their draft shard from these.
    draft_of: str = Field("", max_length=64)


class MemberRecord(_Record):
    shard_id: ShardId
    url: str = Field("", max_length=512)
    incarnation: int = Field(0, ge=0)
    heartbeat: int = Field(0, ge=0)
    load: ShardLoad = ShardLoad()

    @property
    def version(self) -> MemberVersion:
        return (self.incarnation, self.heartbeat)


class AdapterCapabilityAnnouncement(_Record):
    """Paper §IV-A: ⟨shard_id, d, α, λ, n_samples, t, τ_announced⟩, plus ``active`` to withdraw."""

    message_type: Literal["adapter_capability"] = "adapter_capability"
    shard_id: ShardId
    adapter_id: AdapterId
    domain: Domain
    accuracy_delta: float = Field(ge=-1.0, le=1.0)
    performance_delta_p99_ms: float = Field(ge=-3_600_000, le=3_600_000)
    training_samples: int = Field(0, ge=0)
    federation_round: int = Field(0, ge=0)
    announced_at: float = Field(ge=0)
    #: False withdraws the adapter (unloaded) with a newer version instead of waiting for the TTL.
    active: bool = True

    @property
    def key(self) -> str:
        return announcement_key(self.shard_id, self.adapter_id)

    @property
    def version(self) -> AnnouncementVersion:
        return (self.federation_round, self.announced_at)


def announcement_key(shard_id: str, adapter_id: str) -> str:
    """Wire key of ``(shard_id, adapter_id)``; shard ids cannot contain '/', so it splits back."""
    return f"{shard_id}/{adapter_id}"


# ---- exchange payloads (plain data; the codec turns them into signed JSON) -------------------


@dataclass(frozen=True)
class Digest:
    members: Mapping[str, MemberVersion]
    announcements: Mapping[str, AnnouncementVersion]
    members_fp: int
    announcements_fp: int


@dataclass(frozen=True)
class Delta:
    members: tuple[MemberRecord, ...] = ()
    announcements: tuple[AdapterCapabilityAnnouncement, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.members or self.announcements)


@dataclass(frozen=True)
class Wants:
    members: tuple[str, ...] = ()
    announcements: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.members or self.announcements)


@dataclass(frozen=True)
class MergeResult:
    members: int = 0
    announcements: int = 0
    rejected: int = 0


def _h64(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=8).digest(), "big")


@dataclass
class GossipState:
    """One shard's view of the cluster. Mutated only through the methods below."""

    self_id: str
    suspect_timeout_s: float = 5.0
    dead_timeout_s: float = 30.0
    announcement_ttl_s: float = 7200.0
    max_clock_skew_s: float = 60.0
    members: dict[str, MemberRecord] = field(default_factory=dict)
    announcements: dict[str, AdapterCapabilityAnnouncement] = field(default_factory=dict)
    #: Local monotonic time at which each member's version last advanced (never gossiped).
    _last_change: dict[str, float] = field(default_factory=dict, repr=False)
    #: domain → announcement keys, so routing looks only at the request's domain.
    _by_domain: dict[str, dict[str, None]] = field(default_factory=dict, repr=False)  # ordered set
    _members_fp: int = field(default=0, repr=False)
    _announcements_fp: int = field(default=0, repr=False)
    #: Cached version maps per section, rebuilt lazily after that section changes.
    _members_versions: dict[str, MemberVersion] | None = field(default=None, repr=False)
    _announcement_versions: dict[str, AnnouncementVersion] | None = field(default=None, repr=False)

    @classmethod
    def create(
        cls, self_id: str, *, url: str = "", incarnation: int = 0, now: float = 0.0, settings=None
    ) -> GossipState:
        """A fresh state holding only this shard (``incarnation``: e.g. start time in ms)."""
        kw = {}
        if settings is not None:
            kw = dict(
                suspect_timeout_s=settings.suspect_timeout_s,
                dead_timeout_s=settings.dead_timeout_s,
                announcement_ttl_s=settings.announcement_ttl_s,
                max_clock_skew_s=settings.gossip_max_clock_skew_s,
            )
        state = cls(self_id, **kw)
        state._put_member(MemberRecord(shard_id=self_id, url=url, incarnation=incarnation), now)
        return state

    # ---- local updates ----------------------------------------------------------------------

    @property
    def me(self) -> MemberRecord:
        return self.members[self.self_id]

    def beat(self, now: float, load: ShardLoad | None = None) -> MemberRecord:
        """Advance our heartbeat (once per gossip round), publishing the current load with it."""
        me = self.me
        rec = me.model_copy(update={"heartbeat": me.heartbeat + 1, "load": load or me.load})
        self._put_member(rec, now)
        return rec

    def add_seed(self, shard_id: str, url: str, now: float) -> None:
        """A member from the cluster plan, known before we have heard from it (version 0,0)."""
        if shard_id not in self.members:
            self._put_member(MemberRecord(shard_id=shard_id, url=url, incarnation=0, heartbeat=0), now)

    def remove_member(self, shard_id: str) -> None:
        """The plan no longer lists this shard: forget it and its announcements."""
        if shard_id == self.self_id:
            raise ValueError("a shard cannot remove itself")
        old = self.members.pop(shard_id, None)
        if old is not None:
            self._members_fp ^= _h64(old.shard_id, *old.version)
            self._last_change.pop(shard_id, None)
            self._members_versions = None
        for key in [k for k, a in self.announcements.items() if a.shard_id == shard_id]:
            self._drop_announcement(key)

    def announce(self, announcement: AdapterCapabilityAnnouncement) -> None:
        """Publish one of our own adapters' capability (must carry a newer version to replace)."""
        if announcement.shard_id != self.self_id:
            raise ValueError("a shard announces only its own adapters")
        old = self.announcements.get(announcement.key)
        if old is not None and old.version >= announcement.version:
            raise ValueError("announcement must be newer (federation_round, announced_at) than the last")
        self._put_announcement(announcement)

    # ---- merging ----------------------------------------------------------------------------

    def merge(self, delta: Delta, now: float, now_wall: float) -> MergeResult:
        m = self.merge_members(delta.members, now)
        a, rejected = self.merge_announcements(delta.announcements, now_wall)
        return MergeResult(m, a, rejected)

    def merge_members(self, records: Iterable[MemberRecord], now: float) -> int:
        changed = 0
        for rec in records:
            if rec.shard_id == self.self_id:
                if rec.version > self.me.version:  # someone holds a newer "us": refute it
                    self._put_member(
                        self.me.model_copy(update={"incarnation": rec.incarnation + 1, "heartbeat": 0}), now
                    )
                    changed += 1
                continue
            old = self.members.get(rec.shard_id)
            if old is None or rec.version > old.version:
                self._put_member(rec, now)
                changed += 1
        return changed

    def merge_announcements(
        self, anns: Iterable[AdapterCapabilityAnnouncement], now_wall: float
    ) -> tuple[int, int]:
        """(accepted, rejected): expired or future-dated announcements are refused."""
        changed = rejected = 0
        for ann in anns:
            if not self._fresh(ann, now_wall):
                rejected += 1
                continue
            if ann.shard_id == self.self_id:
                # Only we speak for our adapters. A claim about one we do not hold (we restarted,
                # or unloaded it) is withdrawn with a newer version rather than left for the TTL.
                if ann.key not in self.announcements and ann.active:
                    self._put_announcement(
                        ann.model_copy(
                            update={"active": False, "announced_at": max(now_wall, ann.announced_at + 0.001)}
                        )
                    )
                    changed += 1
                continue
            old = self.announcements.get(ann.key)
            if old is None or ann.version > old.version:
                self._put_announcement(ann)
                changed += 1
        return changed, rejected

    def evict_expired(self, now_wall: float) -> int:
        """Drop announcements older than the TTL (τ_ttl); returns how many."""
        ttl = self.announcement_ttl_s
        stale = [k for k, a in self.announcements.items() if now_wall - a.announced_at > ttl]
        for key in stale:
            self._drop_announcement(key)
        return len(stale)

    def _fresh(self, ann: AdapterCapabilityAnnouncement, now_wall: float) -> bool:
        age = now_wall - ann.announced_at
        return -self.max_clock_skew_s <= age <= self.announcement_ttl_s

    # ---- digests and deltas -------------------------------------------------------------------

    def digest(self) -> Digest:
        if self._members_versions is None:
            self._members_versions = {sid: r.version for sid, r in self.members.items()}
        if self._announcement_versions is None:
            self._announcement_versions = {k: a.version for k, a in self.announcements.items()}
        return Digest(
            self._members_versions, self._announcement_versions, self._members_fp, self._announcements_fp
        )

    def delta_for(self, digest: Digest) -> Delta:
        """Entries we hold that are newer than (or missing from) ``digest``."""
        members: tuple[MemberRecord, ...] = ()
        anns: tuple[AdapterCapabilityAnnouncement, ...] = ()
        if digest.members_fp != self._members_fp:
            members = tuple(
                r
                for sid, r in self.members.items()
                if sid not in digest.members or r.version > tuple(digest.members[sid])
            )
        if digest.announcements_fp != self._announcements_fp:
            anns = tuple(
                a
                for k, a in self.announcements.items()
                if k not in digest.announcements or a.version > tuple(digest.announcements[k])
            )
        return Delta(members, anns)

    def wants_from(self, digest: Digest) -> Wants:
        """Keys where ``digest`` is newer than what we hold: ask its owner to push them."""
        members: tuple[str, ...] = ()
        anns: tuple[str, ...] = ()
        if digest.members_fp != self._members_fp:
            members = tuple(
                sid
                for sid, v in digest.members.items()
                if sid not in self.members or tuple(v) > self.members[sid].version
            )
        if digest.announcements_fp != self._announcements_fp:
            anns = tuple(
                k
                for k, v in digest.announcements.items()
                if k not in self.announcements or tuple(v) > self.announcements[k].version
            )
        return Wants(members, anns)

    def entries_for(self, wants: Wants) -> Delta:
        return Delta(
            tuple(self.members[s] for s in wants.members if s in self.members),
            tuple(self.announcements[k] for k in wants.announcements if k in self.announcements),
        )

    @property
    def announcements_fingerprint(self) -> int:
        return self._announcements_fp

    # ---- views ------------------------------------------------------------------------------

    def status(self, shard_id: str, now: float) -> MemberStatus:
        if shard_id == self.self_id:
            return MemberStatus.ALIVE
        age = now - self._last_change[shard_id]
        if age < self.suspect_timeout_s:
            return MemberStatus.ALIVE
        return MemberStatus.SUSPECT if age < self.dead_timeout_s else MemberStatus.DEAD

    def statuses(self, now: float) -> dict[str, MemberStatus]:
        return {sid: self.status(sid, now) for sid in self.members}

    def peers(self, now: float, *, include_dead: bool = False) -> list[str]:
        """Other members worth gossiping with (alive or suspect; dead only if asked)."""
        return [
            sid
            for sid in self.members
            if sid != self.self_id and (include_dead or self.status(sid, now) is not MemberStatus.DEAD)
        ]

    def capabilities(self, domain: str, now: float, now_wall: float) -> list[Capability]:
        """Routing candidates for ``domain``: active, unexpired, from members not known dead."""
        want = domain.strip().lower()
        out = []
        for key in self._by_domain.get(want, ()):
            a = self.announcements[key]
            if not a.active or now_wall - a.announced_at > self.announcement_ttl_s:
                continue
            if a.shard_id in self.members and self.status(a.shard_id, now) is MemberStatus.DEAD:
                continue
            out.append(
                Capability(a.shard_id, a.domain, a.accuracy_delta, a.performance_delta_p99_ms, a.adapter_id)
            )
        return out

    def loads(self) -> Mapping[str, float]:
        """pending_llm_requests per member, as a live read-only view (no copy per routing call)."""
        return _PendingView(self.members)

    def snapshot(self, now: float, now_wall: float) -> dict:
        """JSON-ready view for ``GET /v1/cluster/status``."""
        return {
            "members": [
                {
                    "shard_id": sid,
                    "url": r.url,
                    "status": self.status(sid, now).value,
                    "incarnation": r.incarnation,
                    "heartbeat": r.heartbeat,
                    "seconds_since_heartbeat": round(max(0.0, now - self._last_change[sid]), 3),
                    "load": r.load.model_dump(),
                }
                for sid, r in sorted(self.members.items())
            ],
            "adapters": [
                a.model_dump() | {"age_s": round(now_wall - a.announced_at, 3)}
                for _, a in sorted(self.announcements.items())
            ],
        }

    # ---- internals --------------------------------------------------------------------------

    def _put_member(self, rec: MemberRecord, now: float) -> None:
        old = self.members.get(rec.shard_id)
        if old is not None:
            self._members_fp ^= _h64(old.shard_id, *old.version)
        self._members_fp ^= _h64(rec.shard_id, *rec.version)
        self.members[rec.shard_id] = rec
        self._last_change[rec.shard_id] = now
        self._members_versions = None

    def _put_announcement(self, ann: AdapterCapabilityAnnouncement) -> None:
        old = self.announcements.get(ann.key)
        if old is not None:
            self._announcements_fp ^= _h64(old.key, *old.version)
            self._by_domain[old.domain].pop(old.key, None)
        self._announcements_fp ^= _h64(ann.key, *ann.version)
        self.announcements[ann.key] = ann
        self._by_domain.setdefault(ann.domain, {})[ann.key] = None
        self._announcement_versions = None

    def _drop_announcement(self, key: str) -> None:
        old = self.announcements.pop(key)
        self._announcements_fp ^= _h64(old.key, *old.version)
        self._by_domain[old.domain].pop(key, None)
        self._announcement_versions = None


class _PendingView(Mapping[str, float]):
    def __init__(self, members: dict[str, MemberRecord]) -> None:
        self._members = members

    def __getitem__(self, shard_id: str) -> float:
        return float(self._members[shard_id].load.pending_llm_requests)

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)


class RoutingView:
    """``router.CapabilityView`` over a GossipState, with the clocks injected.

    ``version()`` changes when announcements change and every ``resolution_s`` of time (liveness
    and TTL depend on time), so the router's cached tables are at most that stale — negligible
    against the 5 s / 30 s failure-detector timeouts.
    """

    def __init__(
        self, state: GossipState, clock=time.monotonic, wall_clock=time.time, *, resolution_s: float = 0.25
    ) -> None:
        self.state, self.clock, self.wall_clock = state, clock, wall_clock
        self.resolution_s = resolution_s

    def version(self) -> tuple[int, int, int]:
        return (
            self.state.announcements_fingerprint,
            len(self.state.members),
            int(self.clock() // self.resolution_s),
        )

    def capabilities(self, domain: str) -> list[Capability]:
        return self.state.capabilities(domain, self.clock(), self.wall_clock())

    def adapters(self) -> list[tuple[str, str]]:
        """(adapter id, domain) of every live announcement, whichever shard made it."""
        now, wall = self.clock(), self.wall_clock()
        seen: dict[str, str] = {}
        for a in self.state.announcements.values():
            if any(c.adapter_id == a.adapter_id for c in self.state.capabilities(a.domain, now, wall)):
                seen.setdefault(a.adapter_id, a.domain)
        return sorted(seen.items())

    def loads(self) -> Mapping[str, float]:
        return self.state.loads()

    def dead_peers(self) -> frozenset[str]:
        """Members the failure detector declared dead; route around them like open breakers
        (``open_peers=lambda: executor.open_peers() | view.dead_peers()``)."""
        now = self.clock()
        status = self.state.status
        return frozenset(sid for sid in self.state.members if status(sid, now) is MemberStatus.DEAD)
