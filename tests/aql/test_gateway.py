"""The HTTP gateway speaks the public inference API (API.md "Inference") and maps its answers:
4xx and the shard's own named 503s relayed as they are, no answer or another 5xx as 503."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from themis_shard.aql.gateway import HttpGateway
from themis_shard.errors import ThemisError


def gateway(handler) -> HttpGateway:
    return HttpGateway("http://shard.test", transport=httpx.MockTransport(handler))


def test_infer_batch_and_embed_bodies():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body))
        if request.url.path == "/v1/infer":
            return httpx.Response(200, json={"text": "ok", "shard_id": "shard-1"})
        if request.url.path == "/v1/infer:batch":
            return httpx.Response(
                200, json={"results": [{"text": "a"}, {"error": {"code": "x", "message": "y"}}]}
            )
        return httpx.Response(200, json={"embeddings": [[0.1, 0.2]]})

    gw = gateway(handler)
    assert asyncio.run(gw.infer({"prompt": "p", "domain": "legal"}))["shard_id"] == "shard-1"
    assert len(asyncio.run(gw.infer_batch([{"prompt": "a"}, {"prompt": "b"}]))) == 2
    assert asyncio.run(gw.embed(["t"])) == [[0.1, 0.2]]
    assert seen == [
        ("/v1/infer", {"prompt": "p", "domain": "legal"}),
        ("/v1/infer:batch", {"requests": [{"prompt": "a"}, {"prompt": "b"}]}),
        ("/v1/embed", {"texts": ["t"]}),
    ]


def test_client_errors_are_relayed():
    gw = gateway(
        lambda r: httpx.Response(404, json={"error": {"code": "model_not_found", "message": "no m"}})
    )
    with pytest.raises(ThemisError) as info:
        asyncio.run(gw.infer({"prompt": "p", "model": "m"}))
    assert (info.value.status, info.value.code, info.value.message) == (404, "model_not_found", "no m")


@pytest.mark.parametrize(
    "handler",
    [
        lambda r: httpx.Response(500, json={"error": {"code": "internal", "message": "boom"}}),
        lambda r: httpx.Response(200, text="not json"),
        lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused")),
    ],
)
def test_no_answer_is_503(handler):
    with pytest.raises(ThemisError) as info:
        asyncio.run(gateway(handler).infer({"prompt": "p"}))
    assert (info.value.status, info.value.code) == (503, "inference_unavailable")


def test_a_named_503_is_relayed_by_its_name():
    """A shard without a model (or still loading one) says so: AQL's caller learns the same."""
    gw = gateway(
        lambda r: httpx.Response(503, json={"error": {"code": "llm_disabled", "message": "no model"}})
    )
    with pytest.raises(ThemisError) as info:
        asyncio.run(gw.embed(["t"]))
    assert (info.value.status, info.value.code, info.value.message) == (503, "llm_disabled", "no model")


def test_for_caller_sends_the_callers_authorization_and_nothing_without_one():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"text": "ok"})

    gw = gateway(handler)
    asyncio.run(gw.for_caller("Bearer themis_k").infer({"prompt": "p"}))
    asyncio.run(gw.for_caller(None).infer({"prompt": "p"}))
    assert gw.for_caller(None) is gw
    assert seen == ["Bearer themis_k", None]
