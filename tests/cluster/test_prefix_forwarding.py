"""Spec: a request without a domain runs where it lands, unless another shard holds a longer KV
prefix of its prompt: then it runs there, named by ``X-Themis-Shard``; a holder that is down or
full leaves it here."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client import CollectorRegistry
from themis_shard.cluster.routing.inference import InferenceRouting
from themis_shard.cluster.routing.router import AdaptiveShardRouter
from themis_shard.cluster.transport.remote import RemoteExecutor

from .fakes import error, live, no_sleep, plan_of


class NoCapabilities:
    def capabilities(self, domain):
        return []

    def loads(self):
        return {}


def routing(
    holder: str | None, peer_answers=None, target=None
) -> tuple[InferenceRouting, list[str], CollectorRegistry]:
    current = live(plan_of(3))
    called: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        shard = request.url.host.removesuffix(".test")
        called.append(shard)
        if peer_answers is not None:
            return peer_answers(shard)
        return httpx.Response(200, json={"shard": shard})

    ex = RemoteExecutor(current.settings, current.url, transport=httpx.MockTransport(answer), sleep=no_sleep)
    router = AdaptiveShardRouter(NoCapabilities(), lambda key: ["s-1", "s-2", "s-0"], frozenset)
    registry = CollectorRegistry()
    r = InferenceRouting(
        current,
        ex,
        router,
        frozenset,
        registry,
        prefix_target=target or (lambda key: holder if key == "long" else None),
    )
    return r, called, registry


async def here():
    return {"shard": "s-0"}


def forward(r: InferenceRouting, key: str, domain=None):
    routed = asyncio.run(r.forward("/internal/infer", {"prompt": key}, domain=domain, key=key, local=here))
    assert routed.shard == routed.answer["shard"]
    return routed.answer["shard"]


def test_a_request_whose_prefix_another_shard_holds_runs_there():
    r, called, registry = routing(holder="s-2")
    assert forward(r, "long") == "s-2" and called == ["s-2"]
    assert registry.get_sample_value("themis_inference_prefix_routed_total") == 1


def test_without_a_holder_elsewhere_it_runs_here():
    r, called, _ = routing(holder=None)
    assert forward(r, "short") == "s-0" and called == []
    r, called, _ = routing(holder="s-0")  # this shard holds it
    assert forward(r, "long") == "s-0" and called == []


def test_a_holder_that_is_full_or_unreachable_leaves_the_request_here():
    r, called, registry = routing(holder="s-2", peer_answers=lambda shard: error(429, "queue_full"))
    assert forward(r, "long") == "s-0" and called == ["s-2"]
    assert registry.get_sample_value("themis_inference_prefix_routed_total") == 0
    r, called, _ = routing(holder="s-2", peer_answers=lambda shard: error(503, "llm_not_ready"))
    assert forward(r, "long") == "s-0"


def test_a_broken_prefix_directory_never_fails_the_request():
    r, _, _ = routing(holder=None, target=lambda key: 1 / 0)
    assert forward(r, "long") == "s-0"


def test_a_request_with_a_domain_is_the_domain_routers_whatever_the_prefix():
    r, called, registry = routing(holder="s-2")
    assert forward(r, "long", domain="legal") == "s-1" and called == ["s-1"]
    assert registry.get_sample_value("themis_inference_prefix_routed_total") == 0
