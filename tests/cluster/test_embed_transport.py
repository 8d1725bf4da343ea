"""Spec: data-local EMBED brings a peer's embeddings back as the float32 rows the model computed,
not as JSON, and the caller's floats are exactly the owner's; a peer of an older version (no
such route) is asked in JSON instead, and the owner's refusals reach the client unchanged."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import orjson
import pytest
from prometheus_client import CollectorRegistry
from themis_shard.cluster.routing import embedding as embedding_module
from themis_shard.cluster.routing.inference import InferenceRouting
from themis_shard.cluster.routing.router import AdaptiveShardRouter
from themis_shard.cluster.transport.remote import RemoteExecutor
from themis_shard.cluster.transport.vectors_wire import CONTENT_TYPE, decode_vectors, encode_vectors
from themis_shard.errors import ThemisError

from .fakes import error, live, no_sleep, plan_of

DIMENSION = 4


def rows_for(urns: list[str]) -> np.ndarray:
    """What an owner's model computes for ``urns``: float32 values with no short decimal form."""
    out = np.array([[hash((u, i)) % 10_007 / 10_007.3 for i in range(DIMENSION)] for u in urns], np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def test_rows_arrive_as_exactly_the_floats_the_owner_computed() -> None:
    rows = rows_for(["urn:themis:c:a", "urn:themis:c:b", "urn:themis:c:c"])
    assert decode_vectors(encode_vectors(rows), 3) == rows.tolist()
    assert decode_vectors(encode_vectors(np.zeros((0, DIMENSION), np.float32)), 0) == []


@pytest.mark.parametrize(
    "body, rows, why",
    [
        (b'{"embeddings": []}', 0, "not a vectors body"),
        (encode_vectors(np.zeros((2, DIMENSION), np.float32)), 3, "2 vectors for 3 documents"),
        (encode_vectors(np.zeros((2, DIMENSION), np.float32))[:-1], 2, "bytes of data"),
        (b"TVF4", 1, "has no head"),
    ],
)
def test_a_body_that_is_not_what_it_says_is_refused(body: bytes, rows: int, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode_vectors(body, rows)


def test_only_float32_rows_are_sent() -> None:
    with pytest.raises(ValueError, match="float32"):
        encode_vectors(np.zeros((2, DIMENSION), np.float64))


class NoCapabilities:
    def capabilities(self, domain):
        return []

    def loads(self):
        return {}


def cluster(answer) -> tuple[InferenceRouting, list[tuple[str, str]]]:
    """A 3-shard RAID0 plan seen from s-0, its peers answering with ``answer(path, urns)``;
    also the (peer, path) of every call made."""
    current = live(plan_of(3, "raid0"))
    called: list[tuple[str, str]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        called.append((request.url.host.removesuffix(".test"), request.url.path))
        return answer(request.url.path, orjson.loads(request.content)["urns"])

    ex = RemoteExecutor(current.settings, current.url, transport=httpx.MockTransport(handle), sleep=no_sleep)
    router = AdaptiveShardRouter(NoCapabilities(), lambda key: ["s-0"], frozenset)
    return InferenceRouting(current, ex, router, frozenset, CollectorRegistry()), called


def remote_urns(r: InferenceRouting, n: int) -> list[str]:
    """``n`` URNs of documents s-0 does not hold."""
    topo = r._topo
    keys = (f"k{i}" for i in range(10_000))
    return [f"urn:themis:c:{k}" for k in keys if "s-0" not in topo.owners("c", k)][:n]


async def nothing_here(keys):
    raise AssertionError("no document of these is held here")


def test_a_peer_sends_its_rows_and_the_caller_gets_its_exact_floats_in_urn_order() -> None:
    def answer(path: str, urns: list[str]) -> httpx.Response:
        assert path == "/internal/embed/vectors"
        body = encode_vectors(rows_for(urns))
        return httpx.Response(200, content=body, headers={"content-type": CONTENT_TYPE})

    r, called = cluster(answer)
    urns = remote_urns(r, 6)
    got = asyncio.run(r.embed_urns(urns, nothing_here))
    assert got == [rows_for([u]).tolist()[0] for u in urns]
    assert {path for _, path in called} == {"/internal/embed/vectors"}


def test_a_peer_of_an_older_version_is_asked_in_json_and_not_asked_for_rows_again_at_once() -> None:
    def answer(path: str, urns: list[str]) -> httpx.Response:
        if path == "/internal/embed/vectors":
            return error(404, "not_found", "Not Found")
        return httpx.Response(200, json={"embeddings": rows_for(urns).tolist()})

    r, called = cluster(answer)
    urns = remote_urns(r, 1)
    expected = rows_for(urns).tolist()
    assert asyncio.run(r.embed_urns(urns, nothing_here)) == expected
    assert [path for _, path in called] == ["/internal/embed/vectors", "/internal/embed"]
    called.clear()
    assert asyncio.run(r.embed_urns(urns, nothing_here)) == expected
    assert [path for _, path in called] == ["/internal/embed"]


def test_an_older_peer_is_asked_for_rows_again_once_the_recheck_time_passed(monkeypatch) -> None:
    def answer(path: str, urns: list[str]) -> httpx.Response:
        if path == "/internal/embed/vectors":
            return error(404, "not_found", "Not Found")
        return httpx.Response(200, json={"embeddings": rows_for(urns).tolist()})

    monkeypatch.setattr(embedding_module, "OLDER_PEER_RECHECK_S", 0.0)
    r, called = cluster(answer)
    urns = remote_urns(r, 1)
    asyncio.run(r.embed_urns(urns, nothing_here))
    called.clear()
    asyncio.run(r.embed_urns(urns, nothing_here))
    assert [path for _, path in called] == ["/internal/embed/vectors", "/internal/embed"]


def test_the_owners_refusal_reaches_the_client_as_it_was_given() -> None:
    """A missing document is the owner's 404 ``document_not_found``, not a sign of an older
    peer: it is not asked again in JSON."""

    def answer(path: str, urns: list[str]) -> httpx.Response:
        return error(404, "document_not_found", f"document {urns[0]} does not exist")

    r, called = cluster(answer)
    urns = remote_urns(r, 1)
    with pytest.raises(ThemisError) as refused:
        asyncio.run(r.embed_urns(urns, nothing_here))
    assert (refused.value.status, refused.value.code) == (404, "document_not_found")
    assert [path for _, path in called] == ["/internal/embed/vectors"]


def test_rows_that_do_not_match_the_documents_asked_for_are_not_taken() -> None:
    def answer(path: str, urns: list[str]) -> httpx.Response:
        return httpx.Response(200, content=encode_vectors(rows_for(urns[:-1])))

    r, _ = cluster(answer)
    with pytest.raises(ThemisError) as refused:
        asyncio.run(r.embed_urns(remote_urns(r, 2)[:1] * 2, nothing_here))
    assert refused.value.code == "owners_unavailable"
