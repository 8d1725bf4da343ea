"""Spec: a request that meets a full queue (429) on the shard the router chose is passed to the
next shard; the client sees the 429 only when every shard is full."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client import CollectorRegistry
from themis_shard.cluster.routing.inference import InferenceRouting
from themis_shard.cluster.routing.router import AdaptiveShardRouter
from themis_shard.cluster.transport.remote import RemoteExecutor
from themis_shard.errors import ThemisError

from .fakes import error, live, no_sleep, plan_of


class NoCapabilities:
    def capabilities(self, domain):
        return []

    def loads(self):
        return {}


def routing(full: set[str]) -> tuple[InferenceRouting, list[str]]:
    current = live(plan_of(3))
    called: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        shard = request.url.host.removesuffix(".test")
        called.append(shard)
        if shard in full:
            return error(429, "queue_full")
        return httpx.Response(200, json={"shard": shard, "path": request.url.path})

    ex = RemoteExecutor(current.settings, current.url, transport=httpx.MockTransport(answer), sleep=no_sleep)
    router = AdaptiveShardRouter(NoCapabilities(), lambda key: ["s-1", "s-2", "s-0"], frozenset)
    return InferenceRouting(current, ex, router, frozenset, CollectorRegistry()), called


def local(full: bool):
    async def run():
        if full:
            raise ThemisError("inference queue is full", code="queue_full", status=429)
        return {"shard": "s-0"}

    return run


def forward(r: InferenceRouting, domain, here_full: bool):
    """The answer; the shard it names (``X-Themis-Shard``) must be the one that produced it."""
    routed = asyncio.run(
        r.forward(
            "/internal/openai/completions", {"prompt": "p"}, domain=domain, key="p", local=local(here_full)
        )
    )
    assert routed.shard == routed.answer["shard"]
    return routed.answer


def test_no_domain_runs_here_while_there_is_room():
    r, called = routing(full=set())
    assert forward(r, None, here_full=False) == {"shard": "s-0"} and called == []


def test_a_full_queue_here_spills_to_the_next_shard_that_has_room():
    r, called = routing(full={"s-1"})
    assert forward(r, None, here_full=True) == {"shard": "s-2", "path": "/internal/openai/completions"}
    assert called == ["s-1", "s-2"]


def test_a_429_from_the_chosen_peer_moves_on_instead_of_reaching_the_client():
    r, called = routing(full={"s-1"})
    assert forward(r, "legal", here_full=False)["shard"] == "s-2" and called == ["s-1", "s-2"]


def test_the_client_sees_429_only_when_every_shard_is_full():
    r, _ = routing(full={"s-1", "s-2"})
    with pytest.raises(ThemisError) as exc:
        forward(r, "legal", here_full=True)
    assert exc.value.status == 429 and exc.value.code == "queue_full"
