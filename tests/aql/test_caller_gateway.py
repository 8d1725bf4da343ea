"""AQL's inference runs in process, under the same rules as the public inference routes.

``CallerGateway`` is what the node gives AQL: no HTTP to itself, and nothing a REST caller would
be refused gets through AQL — the body is validated as ``/v1/infer`` validates it (errors name the
field), the caller's API-key role must allow the route, the caller's tenant is admitted and
charged by the node's real ``TenantGate``, and streams or router-only fields are refused by
name. The pipeline behind it is a recorder here; tests/aql/test_llm_aql.py runs the real one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from themis_core.access_policy import Role
from themis_core.tenant_policy import TenantPolicy
from themis_shard.cluster.routing.inference import Routed
from themis_shard.errors import ThemisError
from themis_shard.inference.caller_gateway import CallerGateway
from themis_shard.tenants.caller import Caller
from themis_shard.tenants.gate import TenantGate


@dataclass
class Embeddings:
    embeddings: list[list[float]]


class Pipeline:
    """Records what reached the inference pipeline."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    async def infer(self, req, disconnected):
        assert await disconnected() is False
        self.calls.append(("infer", req.prompt))
        return Routed("shard-1", {"text": "ok", "shard_id": "shard-1"})

    async def infer_batch(self, items, *, stream, timeout_s, disconnected):
        self.calls.append(("batch", [i.prompt for i in items]))
        return [{"text": i.prompt.upper()} for i in items]

    async def embed_texts(self, texts):
        self.calls.append(("embed", texts))
        return Embeddings([[0.5] * 2 for _ in texts])


def gateway(pipeline: Pipeline, *, keys_on: bool = False, gate: TenantGate | None = None) -> CallerGateway:
    return CallerGateway(pipeline, gate, keys_on=keys_on, default_max_tokens=16, max_batch_requests=2)


def refused(call) -> ThemisError:
    with pytest.raises(ThemisError) as info:
        asyncio.run(call)
    return info.value


def test_infer_batch_and_embed_reach_the_pipeline_in_process():
    p = Pipeline()
    gw = gateway(p)
    assert asyncio.run(gw.infer({"prompt": "p", "domain": "legal"})) == {"text": "ok", "shard_id": "shard-1"}
    assert asyncio.run(gw.infer_batch([{"prompt": "a"}, {"prompt": "b"}])) == [{"text": "A"}, {"text": "B"}]
    assert asyncio.run(gw.embed(["t"])) == [[0.5, 0.5]]
    assert p.calls == [("infer", "p"), ("batch", ["a", "b"]), ("embed", ["t"])]


def test_a_bad_body_is_a_400_naming_the_field_as_the_route_would():
    p = Pipeline()
    err = refused(gateway(p).infer({"prompt": "p", "temperature": "hot"}))
    assert (err.status, err.code) == (400, "invalid_request") and err.message.startswith("temperature:")
    err = refused(gateway(p).infer_batch([{"prompt": "a"}, {"prompt": "b", "bogus": 1}]))
    assert err.message.startswith("requests[1]: bogus:")
    assert p.calls == []


@pytest.mark.parametrize(
    ("body", "named"),
    [({"prompt": "p", "stream": True}, "stream"), ({"prompt": "p", "resume": {"tokens": [1]}}, "resume")],
)
def test_streams_and_router_only_fields_are_refused_by_name(body, named):
    err = refused(gateway(Pipeline()).infer(body))
    assert err.status == 400 and named in err.message


def test_an_embed_model_is_refused_by_name():
    err = refused(gateway(Pipeline()).embed(["t"], "other-embedder"))
    assert err.status == 400 and "other-embedder" in err.message


def test_a_batch_over_the_shards_limit_is_413():
    err = refused(gateway(Pipeline()).infer_batch([{"prompt": "a"}] * 3))
    assert (err.status, err.code) == (413, "batch_too_large")


def test_with_keys_on_the_callers_role_must_allow_the_route():
    p = Pipeline()
    gw = gateway(p, keys_on=True)
    err = refused(gw.infer({"prompt": "p"}))
    assert (err.status, err.code) == (403, "forbidden") and "no API key" in err.message
    assert asyncio.run(gw.for_caller(Caller(Role.client)).infer({"prompt": "p"}))["text"] == "ok"
    assert p.calls == [("infer", "p")]


def test_the_callers_tenant_is_admitted_and_charged_by_the_nodes_gate():
    gate = TenantGate({"acme": TenantPolicy("acme", tokens_per_min=20)})
    p = Pipeline()
    gw = gateway(p, gate=gate).for_caller(Caller(Role.client, "acme"))
    asyncio.run(gw.infer({"prompt": "p", "max_tokens": 15}))
    err = refused(gw.infer({"prompt": "p", "max_tokens": 15}))  # 30 > 20 tokens this minute
    assert err.status == 429 and "tokens_per_min" in err.message
    other = gateway(p, gate=gate).for_caller(Caller(Role.client, "globex"))
    asyncio.run(other.infer({"prompt": "q", "max_tokens": 15}))  # another tenant is not charged
    assert p.calls == [("infer", "p"), ("infer", "q")]
