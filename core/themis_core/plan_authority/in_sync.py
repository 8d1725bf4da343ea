"""The in-sync set: who may take a key's writes, and how the plan authority moves it.

Like Kafka's ISR. A key's owners come from the ring; the plan also names the members that are
*out of sync* (fenced: they take no write and coordinate nothing) and those *rejoining* (in
sync again, every write reaches them synchronously, but not yet primary). A write waits for
the key's in-sync owners (``w=all`` means all of them); its primary is the first in-sync owner
in ring order that is not rejoining (``cluster/replication/fencing.py``). ``min_insync`` is the floor below
which ``w=all``/``majority`` writes are refused.

**One authority.** Only the plan authority changes the set, by writing the next plan with the
next epoch: in Kubernetes the operator (a daemon per ThemisCluster, writing the plan ConfigMap
with its ``resourceVersion`` as a precondition), locally the supervisor ``themis up`` starts
(``themis_shard.supervisor``); both run ``authority.PlanAuthority``, which probes every member.
Shards never change it themselves: two shards that each thought the other dead would each take
over its keys (the split brain); a single writer of a totally ordered sequence of epochs cannot
disagree with itself.

**Why it cannot split the brain.**

* Epochs fence writes. Every write carries its coordinator's epoch, and every owner refuses a
  write from another epoch or from a shard that is not the key's primary in it (409, nothing
  applied). A fenced shard that wakes up on an old plan cannot collect the in-sync owners'
  acknowledgements: they moved on.
* Leases fence reads and ``w=1``. A primary acts only while it holds a lease the authority's
  probes grant (``themis_shard.cluster.replication.lease``); the authority fences a member only
  after the last lease it granted it has run out. So when the new epoch hands a key to another
  owner, the old primary has already stopped serving it, even if it never saw the new plan.
  A lease is anchored in the *member's* clock, so the authority may run on another machine:
  every answer carries the member's monotonic clock reading ``c``, and the next probe grants
  until ``c + lease_s`` in that clock. The authority counts the same lease from when that answer
  *arrived* (later than ``c`` was read), so it never believes a lease ran out before the member
  does (only the clocks' rates must agree, to within ``FENCE_MARGIN_S`` over a lease; no offset
  between them matters). A probe delivered late (to a paused member) grants nothing stale.
* Every key keeps a settled in-sync owner: at most ``copies - 1`` members are out of sync or
  rejoining together (a second death in RAID1 leaves the set alone and those keys' writes
  fail, 503, rather than hand them to a copy that may miss committed writes: an out-of-sync or
  rejoining member can lack writes still hinted to it).
* A member returns only caught up. Out of sync it takes the in-sync owners' records (even over
  its own: Kafka's truncation) and drops its hints; it is readmitted as *rejoining* once one
  catch-up round completed at the current epoch, and becomes primary again only after every
  in-sync member runs the rejoining epoch (so every write reaches it), holds no hint for it,
  and it completed another round: nothing committed can be missing from it when it serves.

This module is pure: ``decide`` maps the plan and what the probes saw to the next plan (or
None); ``authority.py`` does the probing and writes the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from themis_core.plan import ClusterPlan, FailoverSettings, with_in_sync

#: After its lease ran out, how long the authority still waits before fencing a member
#: (scheduling slack between the shard's check and the authority's).
FENCE_MARGIN_S = 0.25
#: A member that has not answered once since the authority started is still starting (a
#: shard loads its model and catches up first): it is fenced only after this long.
STARTUP_GRACE_S = 60.0


@dataclass(frozen=True)
class Report:
    """A member's answer to a probe (``POST /internal/lease``)."""

    epoch: int
    caught_up_epoch: int
    ready: bool
    #: hint records it holds, per peer
    hints: Mapping[str, int] = field(default_factory=dict)
    #: its monotonic clock when it answered (None: a shard that cannot anchor a lease)
    clock: float | None = None


@dataclass(frozen=True)
class Member:
    """What the authority knows of one member: when it last answered, whether it is granted
    leases now, until when (in the authority's clock) the last lease it may hold can run, and
    the last report."""

    last_answer: float
    granting: bool = True
    #: in the authority's clock: no lease granted to this member runs past this
    lease_end: float = 0.0
    report: Report | None = None
    #: it answered at least once (before that it may still be starting)
    seen: bool = False

    @classmethod
    def new(cls, now: float, settings: FailoverSettings) -> Member:
        """An authority that just started assumes a lease granted now (it cannot know better)."""
        return cls(last_answer=now, lease_end=now + settings.lease_s)

    def sent(self, settings: FailoverSettings) -> Member:
        """A probe that grants (``lease_until``) is on its way: the lease it grants ends, in our
        clock, ``lease_s`` after the answer it is anchored on arrived."""
        if lease_until(self, settings) == 0.0:
            return self
        return replace(self, lease_end=max(self.lease_end, self.last_answer + settings.lease_s))

    def answered(self, at: float, report: Report) -> Member:
        return replace(self, last_answer=at, granting=True, report=report, seen=True)

    def missed(self) -> Member:
        return replace(self, granting=False, report=None)


def lease_until(member: Member, settings: FailoverSettings) -> float:
    """What a probe sent now grants, in the member's clock: ``lease_s`` past its clock reading
    in its last answer; none (0) to a member that missed a probe since, or never reported a clock."""
    clock = member.report.clock if member.report is not None else None
    return clock + settings.lease_s if member.granting and clock is not None else 0.0


def fenceable(member: Member, now: float, settings: FailoverSettings) -> bool:
    """Down long enough (much longer when it never answered: it may be starting), and past the
    last lease granted to it."""
    silent_for = settings.failover_after_s if member.seen else STARTUP_GRACE_S
    return (
        not member.granting
        and now - member.last_answer > silent_for
        and now > member.lease_end + FENCE_MARGIN_S
    )


def epoch_behind(plan: ClusterPlan, members: Mapping[str, Member]) -> int | None:
    """The highest epoch a member runs when it is above the plan's (a plan restored from an
    older copy): members refuse that plan as stale, and its in-sync set may readmit a member
    that has not caught up, so the authority changes nothing until the plan is current."""
    seen = max((m.report.epoch for m in members.values() if m.report is not None), default=0)
    return seen if seen > plan.plan_epoch else None


def decide(plan: ClusterPlan, members: Mapping[str, Member], now: float) -> ClusterPlan | None:
    """The next plan, one change at a time, or None: fence a member that is down (while every
    key keeps an in-sync owner), or move a caught-up member one step back in."""
    settings = plan.failover
    if settings is None or plan.previous_ring is not None:  # a handoff has its own protocol
        return None
    if epoch_behind(plan, members) is not None:
        return None
    ring = list(plan.ring_spec.shards)
    out, back = set(plan.out_of_sync), set(plan.rejoining)
    down = [s for s in ring if s not in out and s in members and fenceable(members[s], now, settings)]
    for s in down:
        # Every key must keep a settled in-sync owner: a rejoining one may still miss writes
        # hinted to it, so it never becomes a key's only copy (it would serve without them).
        if len(out | back | {s}) <= plan.copies - 1:
            return with_in_sync(plan, tuple(out | {s}), tuple(back - {s}))
    epoch = plan.plan_epoch
    reports = {s: m.report for s, m in members.items() if m.report is not None}
    in_sync = [s for s in ring if s not in out]

    def caught_up(s: str) -> bool:
        r = reports.get(s)
        return r is not None and r.ready and r.epoch == epoch and r.caught_up_epoch >= epoch

    def nothing_pending_for(s: str) -> bool:
        return all(
            p in reports and reports[p].epoch == epoch and not reports[p].hints.get(s, 0)
            for p in in_sync
            if p != s
        )

    for s in sorted(out):
        if caught_up(s):
            return with_in_sync(plan, tuple(out - {s}), tuple(back | {s}))
    for s in sorted(back):
        if caught_up(s) and nothing_pending_for(s):
            return with_in_sync(plan, tuple(out), tuple(back - {s}))
    return None
