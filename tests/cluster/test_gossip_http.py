"""Gossip over real HTTP: uvicorn peers serving /internal/gossip, RemoteExecutor as transport."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

import pytest
import uvicorn
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from themis_shard.cluster.membership.gossip import Gossiper, http_transport
from themis_shard.cluster.membership.gossip_state import (
    AdapterCapabilityAnnouncement,
    GossipState,
)
from themis_shard.cluster.membership.gossip_wire import GossipCodec, InvalidGossipMessage
from themis_shard.cluster.settings import ClusterSettings
from themis_shard.cluster.transport.remote import PeerError, RemoteExecutor

from .peers import bound_socket


def gossip_app(gossiper: Gossiper) -> Starlette:
    """What the shard app will mount: the endpoint is a thin shell around ``Gossiper.handle``."""

    async def endpoint(request: Request) -> JSONResponse:
        try:
            return JSONResponse(await gossiper.handle(await request.body()))
        except InvalidGossipMessage as exc:
            return JSONResponse({"error": {"code": "invalid_gossip", "message": exc.reason}}, status_code=400)

    return Starlette(routes=[Route("/internal/gossip", endpoint, methods=["POST"])])


class Node:
    def __init__(self, sid: str, ids: list[str], urls: dict[str, str], sock, seed: int) -> None:
        self.registry = CollectorRegistry()
        settings = ClusterSettings(gossip_secret="s3cret", request_timeout_s=2, connect_timeout_s=1)
        self.executor = RemoteExecutor(settings, urls.__getitem__, registry=self.registry)
        state = GossipState.create(sid, url=urls[sid], incarnation=1, settings=settings)
        for other in ids:
            state.add_seed(other, urls[other], now=time.monotonic())
        self.gossiper = Gossiper.from_settings(
            state,
            GossipCodec.from_settings("themis", settings),
            http_transport(self.executor),
            settings,
            rng=random.Random(seed),
            registry=self.registry,
        )
        self.sock = sock
        config = uvicorn.Config(gossip_app(self.gossiper), log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        self.task = asyncio.create_task(self.server.serve(sockets=[self.sock]))
        while not self.server.started:
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        self.server.should_exit = True
        if self.task:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.executor.aclose()


def test_three_shards_gossip_over_http_and_survive_a_dead_peer_and_garbage():
    async def go():
        ids = ["s0", "s1", "s2"]
        socks = {sid: bound_socket() for sid in ids}
        urls = {sid: f"http://127.0.0.1:{socks[sid].getsockname()[1]}" for sid in ids}
        nodes = {sid: Node(sid, ids, urls, socks[sid], i) for i, sid in enumerate(ids)}
        for n in nodes.values():
            await n.start()
        try:
            nodes["s2"].gossiper.state.announce(
                AdapterCapabilityAnnouncement(
                    shard_id="s2",
                    adapter_id="legal-qa",
                    domain="legal",
                    accuracy_delta=0.9,
                    performance_delta_p99_ms=8,
                    federation_round=1,
                    announced_at=time.time(),
                )
            )
            for _ in range(3):
                await asyncio.gather(*(n.gossiper.gossip_round() for n in nodes.values()))
            for n in nodes.values():
                assert "s2/legal-qa" in n.gossiper.state.announcements
                assert n.gossiper.state.members["s1"].heartbeat >= 2

            # Garbage and forged messages at the endpoint: 400, counted, state untouched.
            ex = nodes["s0"].executor
            forged = GossipCodec("themis", b"wrong").encode("s1", "syn", time.time())
            for body in ({"hello": "world"}, forged):
                with pytest.raises(PeerError) as err:
                    await ex.post_json("s1", "/internal/gossip", body)
                assert err.value.status == 400 and err.value.code == "invalid_gossip"
            dropped = nodes["s1"].registry.get_sample_value
            assert dropped("themis_gossip_messages_dropped_total", {"reason": "bad_shape"}) == 1
            assert dropped("themis_gossip_messages_dropped_total", {"reason": "bad_signature"}) == 1

            # s2 dies: rounds keep completing quickly; exchanges with s2 fail and are counted.
            await nodes["s2"].stop()
            loop = asyncio.get_running_loop()
            started = loop.time()
            for _ in range(3):
                await asyncio.gather(nodes["s0"].gossiper.gossip_round(), nodes["s1"].gossiper.gossip_round())
            assert loop.time() - started < 3.0
            sample = nodes["s0"].registry.get_sample_value
            assert sample("themis_gossip_exchanges_total", {"outcome": "error"}) >= 1
            assert nodes["s0"].gossiper.state.members["s1"].heartbeat >= 5
        finally:
            for n in nodes.values():
                if not n.server.should_exit:
                    await n.stop()

    asyncio.run(go())
