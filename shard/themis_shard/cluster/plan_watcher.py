"""The plan watcher: adopt the plan file the operator rewrites, and act on what it places here.

The operator only writes the plan; shards act on it — no heavy calls from the operator. Every
second the watcher looks at the file's mtime; a changed, valid plan swaps the topology and
router settings in the ``LivePlan`` every part reads, reseeds membership, and (when the ring
changed) starts a handoff. An unreadable or half-written file is ignored and the old plan kept.
Every two seconds it also loads the LoRA adapters the plan places on this shard and unloads
those it no longer does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Gauge
from themis_core.plan import AdapterPlacement, ClusterPlan, is_rollback

from ..llm.fetch import FetchError, SourceFetcher, is_url
from .placement.owners import Topology
from .placement.views import LivePlan, RuntimeSource
from .routing.router import RoutingPolicy
from .tasks import Tasks

log = logging.getLogger(__name__)


class PolicySink(Protocol):
    """The router, which takes new thresholds/weights when the plan's router settings change."""

    def set_policy(self, policy: RoutingPolicy) -> None: ...


class MemberSeeds(Protocol):
    """Membership, which seeds added members and forgets removed ones (``Membership``)."""

    def adopt_plan(self, plan: ClusterPlan) -> None: ...


class HandoffStarter(Protocol):
    """The handoff, started when the ring changes (``migration.Handoff``)."""

    def begin(self) -> None: ...


# -- pure decisions ------------------------------------------------------------------------------
def placed_here(adapters: Iterable[AdapterPlacement], self_id: str) -> dict[str, AdapterPlacement]:
    return {a.name: a for a in adapters if self_id in a.shards}


def adapters_to_load(
    wanted: Mapping[str, AdapterPlacement], loaded: Iterable[str], failed: Iterable[str]
) -> list[AdapterPlacement]:
    """Placed here, not loaded yet, and not failed under this plan (a failure waits for a new plan)."""
    skip = set(loaded) | set(failed)
    return [p for name, p in wanted.items() if name not in skip]


def adapters_to_unload(
    from_plan: Iterable[str], wanted: Mapping[str, AdapterPlacement], loaded: Iterable[str]
) -> list[str]:
    """Adapters the plan loaded here and no longer places here (others were loaded by hand)."""
    loaded = set(loaded)
    return [name for name in from_plan if name not in wanted and name in loaded]


def adapter_path(source: str) -> str | None:
    """The local path of an adapter source (``file://`` or a bare path); None for other schemes."""
    path = source.removeprefix("file://")
    return None if "://" in path else path


class PlanWatcher:
    def __init__(
        self,
        self_id: str,
        plan_path: Path | None,
        live: LivePlan,
        router: PolicySink,
        members: MemberSeeds,
        handoff: HandoffStarter,
        runtime: RuntimeSource,
        registry: CollectorRegistry,
        fetcher: SourceFetcher | None = None,
    ) -> None:
        self.self_id = self_id
        self._fetcher = fetcher
        self.plan_path = plan_path
        self.live = live
        self.router = router
        self.members = members
        self.handoff = handoff
        self._runtime = runtime
        self.ring_version = Gauge("themis_ring_version", "Ring version of the plan in use", registry=registry)
        self.ring_version.set(live.topology.version)
        self._plan_mtime = self._mtime()
        self._plan_adapters: set[str] = set()
        self._adapter_failures: dict[str, str] = {}
        self._tasks = Tasks()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self._tasks.every(2.0, self.sync_adapters, "plan-adapters")
        if self.plan_path:
            self._tasks.every(1.0, self._watch_plan, "plan-watch")

    async def stop(self) -> None:
        await self._tasks.cancel()

    # -- the plan file -----------------------------------------------------------------------
    def _mtime(self) -> float | None:
        try:
            return self.plan_path.stat().st_mtime if self.plan_path else None
        except OSError:
            return None

    async def _watch_plan(self) -> None:
        self.reload_plan()

    def reload_plan(self) -> bool:
        """Adopt a changed plan file; True when the plan changed."""
        mtime = self._mtime()
        if mtime is None or mtime == self._plan_mtime:
            return False
        self._plan_mtime = mtime
        try:
            plan = ClusterPlan.load(self.plan_path)
        except Exception as exc:  # a half-written or invalid plan is ignored, the old one kept
            log.warning("ignoring unreadable plan %s: %s", self.plan_path, exc)
            return False
        if plan == self.live.topology.plan:
            return False
        if is_rollback(self.live.topology.plan, plan):
            log.error(
                "refusing plan %s: ring version %d is lower than %d in use for cluster uid %s",
                self.plan_path,
                plan.ring_version,
                self.live.topology.version,
                plan.cluster_uid,
            )
            return False
        self.adopt(plan)
        return True

    def adopt_pushed(self, plan: ClusterPlan) -> bool:
        """Adopt a plan the authority sent with its probe when it is the newer one of this
        cluster (its epoch above ours, same uid, no ring rollback); the file catches up later
        and is then the same plan (a file still older is refused as a rollback)."""
        current = self.live.topology.plan
        if plan.cluster_uid != current.cluster_uid or plan.plan_epoch <= current.plan_epoch:
            return False
        if is_rollback(current, plan) or plan.ring_version != current.ring_version:
            return False  # a ring change comes with a handoff: the file brings it
        self.adopt(plan)
        return True

    def adopt(self, plan: ClusterPlan) -> None:
        """Swap in ``plan``: topology, router settings, members, and a handoff if the ring moved."""
        log.info(
            "plan changed: ring version %d → %d, epoch %d → %d (out of sync: %s; rejoining: %s)",
            self.live.topology.version,
            plan.ring_version,
            self.live.topology.epoch,
            plan.plan_epoch,
            ", ".join(plan.out_of_sync) or "-",
            ", ".join(plan.rejoining) or "-",
        )
        ring_changed = plan.ring_version != self.live.topology.version
        self.live.topology = Topology.of(plan, self.self_id)
        self._adapter_failures.clear()  # a new plan may have fixed a placement: try again
        self.ring_version.set(plan.ring_version)
        self.live.settings = self.live.settings.with_router(plan.router)
        self.router.set_policy(RoutingPolicy.from_settings(self.live.settings))
        self.members.adopt_plan(plan)
        if ring_changed:
            self.handoff.begin()

    # -- adapter placement -------------------------------------------------------------------
    def adapter_report(self) -> dict[str, Any]:
        """What ``/v1/cluster/status`` shows: adapters loaded from the plan, and those that failed."""
        return {"loaded": sorted(self._plan_adapters), "failed": dict(self._adapter_failures)}

    async def sync_adapters(self) -> None:
        """Load the LoRA adapters the plan places on this shard; unload the ones it no longer does."""
        runtime = self._runtime.runtime
        if runtime is None or not getattr(runtime, "ready", False):
            return
        wanted = placed_here(self.live.topology.plan.adapters, self.self_id)
        manager = runtime.model(None).adapters
        loaded = {info.name for info in manager.list()}
        for placement in adapters_to_load(wanted, loaded, self._adapter_failures):
            await self._load(manager, placement)
        for name in adapters_to_unload(list(self._plan_adapters), wanted, loaded):
            await manager.unload(name)
            self._plan_adapters.discard(name)
            log.info("unloaded adapter %s: no longer placed on this shard", name)

    async def _local_file(self, placement: AdapterPlacement) -> str:
        """A path to load: the source itself, or an http(s) source fetched (sha256 checked)."""
        if is_url(placement.source):
            if self._fetcher is None:
                raise FetchError(f"adapter source {placement.source} needs a fetcher (none configured)")
            path = await self._fetcher.fetch(
                placement.source,
                sha256=placement.sha256,
                max_bytes=self._fetcher.settings.max_adapter_bytes,
                what="adapter",
            )
            return str(path)
        source = adapter_path(placement.source)
        if source is None:
            raise FetchError(
                f"unsupported adapter source {placement.source!r} (a path, pvc:// or http(s)://)",
                code="bad_source",
            )
        return source

    async def _load(self, manager: Any, placement: AdapterPlacement) -> None:
        name = placement.name
        try:
            source = await self._local_file(placement)
            info = await manager.load(name, source, domain=placement.domain, scale=placement.scale)
        except Exception as exc:  # a bad file must not stop the shard; report and go on
            self._adapter_failures[name] = str(exc) or type(exc).__name__
            log.warning("adapter %s from the plan failed to load: %s", name, exc)
            return
        if placement.sha256 and info.sha256 != placement.sha256:
            await manager.unload(name)
            self._adapter_failures[name] = f"sha256 mismatch: expected {placement.sha256}, got {info.sha256}"
            log.error("adapter %s: %s", name, self._adapter_failures[name])
            return
        self._plan_adapters.add(name)
        log.info("loaded adapter %s (%s) from the plan", name, placement.domain)
