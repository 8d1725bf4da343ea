"""Membership: who is in the cluster, who is alive, and what each member announces.

The gossip state is the shard's view of its peers (heartbeats with load, adapter capability
announcements); the gossip loop exchanges it over ``POST /internal/gossip``. Without a gossip
secret there is no gossip, and liveness falls back to the circuit breakers. Breakers of open
peers are also closed out of band by a ``/ready`` probe, so a peer that came back is used again
before the next real request would have probed it. The choice of draft shard for speculative
decoding reads the same view (who drafts for our model, and how loaded they are).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from themis_core.plan import ClusterPlan

from ..placement.views import RuntimeSource, SettingsSource, TopologySource
from ..tasks import Tasks
from ..transport.remote import RemoteExecutor
from .announcer import announcements_to_publish, resident_adapters
from .draft_shard import choose_draft_shard
from .gossip import Gossiper
from .gossip_state import GossipState, RoutingView, ShardLoad
from .gossip_wire import GossipCodec

log = logging.getLogger(__name__)


class PlanSource(TopologySource, SettingsSource, Protocol):
    """The current topology and settings (``views.LivePlan``)."""


def breaker_states(members: Iterable[str], open_peers: frozenset[str]) -> dict[str, str]:
    """Member states without gossip: a peer behind an open breaker counts as dead."""
    return {m: ("dead" if m in open_peers else "alive") for m in members}


class Membership:
    def __init__(
        self,
        self_id: str,
        plan: ClusterPlan,
        current: PlanSource,
        executor: RemoteExecutor,
        runtime: RuntimeSource,
        registry: CollectorRegistry,
        load: Callable[[], ShardLoad] | None = None,
    ) -> None:
        self.self_id = self_id
        self._plan = current
        self.executor = executor
        self._runtime = runtime
        settings = current.settings
        self.state = GossipState.create(
            self_id,
            url=current.topology.url(self_id),
            incarnation=time.time_ns() // 1_000_000,
            now=time.monotonic(),
            settings=settings,
        )
        for member in plan.members:
            if member.shard_id != self_id:
                self.state.add_seed(member.shard_id, member.url, time.monotonic())
        if load is not None:
            sample = load

            def load() -> ShardLoad:  # what the engine's metrics say, plus what we draft for
                return sample().model_copy(update={"draft_of": self._draft_of()})

        secret = settings.gossip_secret
        self.gossiper: Gossiper | None = None
        if secret is not None and current.topology.clustered:
            codec = GossipCodec(plan.cluster, secret.get_secret_value().encode())
            self.gossiper = Gossiper.from_settings(
                self.state, codec, self._gossip_transport, settings, load=load, registry=registry
            )
        self.view = RoutingView(self.state)
        self._tasks = Tasks()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        settings = self._plan.settings
        if self.gossiper is not None:
            self._tasks.add(self.gossiper.start())
            self._tasks.every(settings.gossip_interval_s, self._announce, "announce")
        if settings.breaker_health_probe_s:
            self._tasks.every(settings.breaker_health_probe_s, self.probe_open_peers, "breaker-probe")

    async def stop(self) -> None:
        if self.gossiper is not None:
            await self.gossiper.stop()
        await self._tasks.cancel()

    # -- the plan's members ------------------------------------------------------------------
    def adopt_plan(self, plan: ClusterPlan) -> None:
        """Seed members the new plan added; forget the ones it removed."""
        known = set(self.state.members)
        for member in plan.members:
            if member.shard_id not in known:
                self.state.add_seed(member.shard_id, member.url, time.monotonic())
        for gone in known - {m.shard_id for m in plan.members} - {self.self_id}:
            self.state.remove_member(gone)

    def member_states(self) -> dict[str, str]:
        if self.gossiper is None:
            return breaker_states(self._plan.topology.members, self.executor.open_peers())
        return {m: str(s) for m, s in self.state.statuses(time.monotonic()).items()}

    def unavailable(self) -> frozenset[str]:
        """Peers not to route to: behind an open breaker or dead to gossip."""
        return self.executor.open_peers() | self.view.dead_peers()

    # -- gossip ------------------------------------------------------------------------------
    async def _gossip_transport(self, peer: str, message: dict[str, Any]) -> Any:
        return await self.executor.request(
            peer,
            "POST",
            "/internal/gossip",
            json_body=message,
            retries=0,
            timeout_s=self._plan.settings.exchange_timeout_s,
        )

    async def _announce(self) -> None:
        """Publish our adapters' capabilities (and withdrawals) into the gossip state."""
        runtime = self._runtime.runtime
        if runtime is None:
            return
        mine = {a.adapter_id: a for a in self.state.announcements.values() if a.shard_id == self.self_id}
        for ann in announcements_to_publish(
            self.self_id,
            resident_adapters(runtime),
            mine,
            time.time(),
            self._plan.settings.announcement_ttl_s,
        ):
            self.state.announce(ann)

    async def probe_open_peers(self) -> None:
        """Close the breaker of an open or half-open peer that answers /ready again
        (out-of-band probe)."""
        for peer in self.executor.breakers.unclosed_peers():
            if peer not in self._plan.topology.members:
                continue
            if await self.executor.revive(peer):  # a peer still down keeps its breaker open
                log.info("peer %s answers again; breaker closed", peer)

    # -- speculative decoding: this shard's draft shard -------------------------------------------
    def _draft_of(self) -> str:
        runtime = self._runtime.runtime
        return getattr(runtime, "draft_of", "") if runtime is not None else ""

    def draft_target(self):
        """The peer to fetch drafts from (``LLMSettings.draft_shard``: an id, or "auto" = the
        least-loaded live peer gossiping ``draft_of`` = our model); None when there is none."""
        from ...llm.speculative.remote import DraftTarget

        runtime = self._runtime.runtime
        if runtime is None:
            return None
        want = runtime.settings.draft_shard
        if want == "auto":
            try:
                sha = runtime.model(None).fingerprint.sha256
            except Exception:
                return None
            want = choose_draft_shard(
                dict(self.state.members),
                self_id=self.self_id,
                model_sha256=sha,
                unavailable=self.unavailable(),
            )
        if not want or want == self.self_id:
            return None
        try:
            url = self._plan.topology.url(want)
        except KeyError:
            url = self.state.members[want].url if want in self.state.members else ""
        if not url:
            return None
        return DraftTarget(
            url,
            peer=want,
            breaker=self.executor.breakers.get(want),
            ssl_context=self.executor.ssl_context,
            auth=self.executor.auth,
        )
