"""The gossip loop: every δ, push-pull with f random peers through an injected transport.

I/O lives only at the edges: the transport is any ``async (peer_id, message) -> reply`` callable
(the shard plugs in RemoteExecutor + ``POST /internal/gossip``; tests plug in a dict of
in-process Gossipers), and clocks are injected. The data and merge rules are in
``gossip_state``; this module only schedules exchanges, bounds them in time and counts what
goes wrong. A failing or slow peer costs one bounded exchange and never stops the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .gossip_state import GossipState, MemberStatus, ShardLoad
from .gossip_wire import GossipCodec, InvalidGossipMessage

log = logging.getLogger(__name__)

Transport = Callable[[str, dict[str, Any]], Awaitable[Any]]
Clock = Callable[[], float]

#: Chance per round of also contacting one member we believe dead: without it two halves of a
#: healed partition would each consider the other dead forever.
DEAD_PROBE_PROBABILITY = 0.1


def http_transport(executor: Any, path: str = "/internal/gossip") -> Transport:
    """The production transport: POST the message to the peer through the RemoteExecutor.

    No retries (the next round is the retry) and marked idempotent (merges are).
    """

    async def send(peer: str, message: dict[str, Any]) -> Any:
        return await executor.post_json(peer, path, message, idempotent=True, retries=0)

    return send


class GossipMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.dropped = Counter(
            "themis_gossip_messages_dropped_total",
            "Gossip messages rejected (bad_shape, bad_signature, wrong_cluster, stale, too_large)",
            ["reason"],
            registry=registry,
        )
        self.exchanges = Counter(
            "themis_gossip_exchanges_total",
            "Push-pull exchanges we started, by outcome",
            ["outcome"],
            registry=registry,
        )
        self.round_seconds = Histogram(
            "themis_gossip_round_seconds",
            "Duration of one gossip round (all exchanges)",
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=registry,
        )


class MembersCollector(Collector):
    """``themis_gossip_members{status}`` computed at scrape time (status changes with time)."""

    def __init__(self, state: GossipState, clock: Clock) -> None:
        self._state, self._clock = state, clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "themis_gossip_members", "Known cluster members by status", labels=["status"]
        )
        counts = dict.fromkeys(MemberStatus, 0)
        for status in self._state.statuses(self._clock()).values():
            counts[status] += 1
        for status, n in counts.items():
            family.add_metric([status.value], n)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("themis_gossip_members", "Known cluster members by status", labels=["status"])


class Gossiper:
    """Runs the gossip protocol for one shard's :class:`GossipState`."""

    def __init__(
        self,
        state: GossipState,
        codec: GossipCodec,
        transport: Transport,
        *,
        interval_s: float = 1.0,
        fanout: int = 3,
        exchange_timeout_s: float | None = None,
        load: Callable[[], ShardLoad] | None = None,
        rng: random.Random | None = None,
        clock: Clock = time.monotonic,
        wall_clock: Clock = time.time,
        registry: CollectorRegistry | None = None,
        dead_probe_probability: float = DEAD_PROBE_PROBABILITY,
    ) -> None:
        self.state = state
        self.codec = codec
        self.transport = transport
        self.interval_s = interval_s
        self.fanout = fanout
        self.exchange_timeout_s = exchange_timeout_s or interval_s
        self.load = load
        self.rng = rng or random.Random()
        self.clock = clock
        self.wall_clock = wall_clock
        self.dead_probe_probability = dead_probe_probability
        registry = registry or CollectorRegistry()
        self.metrics = GossipMetrics(registry)
        registry.register(MembersCollector(state, clock))
        self._task: asyncio.Task | None = None

    @classmethod
    def from_settings(
        cls, state: GossipState, codec: GossipCodec, transport: Transport, settings, **kw: Any
    ) -> Gossiper:
        return cls(
            state,
            codec,
            transport,
            interval_s=settings.gossip_interval_s,
            fanout=settings.gossip_fanout,
            exchange_timeout_s=settings.exchange_timeout_s,
            **kw,
        )

    # ---- client side ----------------------------------------------------------------------

    def choose_peers(self) -> list[str]:
        """f random live (alive or suspect) peers, plus sometimes one dead one to heal partitions.

        A shard that believes everyone else is dead (it was partitioned) probes f dead peers.
        """
        now = self.clock()
        live = self.state.peers(now)
        chosen = self.rng.sample(live, min(self.fanout, len(live)))
        dead = [p for p in self.state.peers(now, include_dead=True) if p not in live]
        if not live:  # we are the one cut off (or alone): keep knocking on every door
            return self.rng.sample(dead, min(self.fanout, len(dead)))
        if dead and self.rng.random() < self.dead_probe_probability:
            chosen.append(self.rng.choice(dead))
        return chosen

    async def gossip_round(self) -> int:
        """One round: beat, evict stale announcements, exchange with the chosen peers.

        Returns the number of exchanges that completed.
        """
        started = self.clock()
        self.state.beat(started, self.load() if self.load else None)
        self.state.evict_expired(self.wall_clock())
        peers = self.choose_peers()
        results = await asyncio.gather(*(self.exchange(p) for p in peers))
        self.metrics.round_seconds.observe(self.clock() - started)
        return sum(results)

    async def exchange(self, peer: str) -> bool:
        """SYN → ACK (merge, answer wants) → PUSH, bounded by the exchange timeout."""
        try:
            async with asyncio.timeout(self.exchange_timeout_s):
                await self._exchange(peer)
        except InvalidGossipMessage as exc:
            self.metrics.dropped.labels(reason=exc.reason).inc()
            self.metrics.exchanges.labels(outcome="invalid").inc()
            log.debug("gossip with %s: dropped reply (%s)", peer, exc)
            return False
        except TimeoutError:
            self.metrics.exchanges.labels(outcome="timeout").inc()
            return False
        except Exception as exc:  # transport failure of any kind: the peer is simply not heard
            self.metrics.exchanges.labels(outcome="error").inc()
            log.debug("gossip with %s failed: %r", peer, exc)
            return False
        self.metrics.exchanges.labels(outcome="ok").inc()
        return True

    async def _exchange(self, peer: str) -> None:
        me = self.state.self_id
        syn = self.codec.encode(me, "syn", self.wall_clock(), digest=self.state.digest())
        ack = self.codec.decode(await self.transport(peer, syn), self.wall_clock())
        if ack.kind != "ack":
            raise InvalidGossipMessage("bad_shape", f"expected ack, got {ack.kind}")
        self.state.merge(ack.delta, self.clock(), self.wall_clock())
        if ack.wants:
            push = self.codec.encode(me, "push", self.wall_clock(), delta=self.state.entries_for(ack.wants))
            reply = self.codec.decode(await self.transport(peer, push), self.wall_clock())
            if reply.kind != "push_ack":
                raise InvalidGossipMessage("bad_shape", f"expected push_ack, got {reply.kind}")

    # ---- server side (POST /internal/gossip) ---------------------------------------------

    async def handle(self, raw: object) -> dict[str, Any]:
        """Answer one incoming message. Raises InvalidGossipMessage (counted) → the endpoint's 400."""
        try:
            msg = self.codec.decode(raw, self.wall_clock())
            if msg.kind == "syn" and msg.digest is not None:
                delta = self.state.delta_for(msg.digest)
                wants = self.state.wants_from(msg.digest)
                return self.codec.encode(
                    self.state.self_id, "ack", self.wall_clock(), delta=delta, wants=wants
                )
            if msg.kind == "push":
                self.state.merge(msg.delta, self.clock(), self.wall_clock())
                return self.codec.encode(self.state.self_id, "push_ack", self.wall_clock())
            raise InvalidGossipMessage("bad_shape", f"unexpected {msg.kind}")
        except InvalidGossipMessage as exc:
            self.metrics.dropped.labels(reason=exc.reason).inc()
            raise

    # ---- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Gossip every interval until cancelled; a round that overruns delays the next, no burst."""
        while True:
            started = self.clock()
            try:
                await self.gossip_round()
            except Exception:  # a bug in one round must not end membership for good
                log.exception("gossip round failed")
            await asyncio.sleep(max(0.0, self.interval_s - (self.clock() - started)))

    def start(self) -> asyncio.Task:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"gossip-{self.state.self_id}")
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
