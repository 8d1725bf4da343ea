"""Spec: ``AsyncThemisClient`` — the same operations as the sync client, against a real shard app
on uvicorn (and a real HTTP server for the retry rules)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from themis_client import (
    AsyncInferStream,
    AsyncThemisClient,
    NotFound,
    Operation,
    RetryPolicy,
    ThemisConnectionError,
    VersionConflict,
)
from themis_shard.app import create_app
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings

FAST = RetryPolicy(attempts=3, base_delay_s=0.001, max_delay_s=0.01)


@pytest.fixture
def shard_url(tmp_path: Path) -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(Settings(data_dir=tmp_path / "shard", llm=LLMSettings(enabled=False)))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_documents_transactions_search_and_aql(shard_url: str) -> None:
    async def scenario() -> None:
        async with AsyncThemisClient(shard_url, retry=FAST) as db:
            assert (await db.put("books", "dune", {"y": 1965})).version == 1
            with pytest.raises(VersionConflict):
                await db.put("books", "dune", {"y": 1966}, if_match=5)
            assert (await db.get("books", "dune")).document == {"y": 1965}
            done = await db.transaction(
                [Operation.put("books", "a", {"y": 1951}), Operation.delete("books", "dune")]
            )
            assert done.committed
            with pytest.raises(NotFound):
                await db.get("books", "dune")
            await db.declare_collection("vecs", dimension=2)
            await asyncio.gather(*(db.put("vecs", f"v{i}", {"embedding": [1.0, i / 10]}) for i in range(4)))
            hits = await db.search("vecs", vector=[1.0, 0.0], k=1)
            assert [h.urn for h in hits.results] == ["urn:themis:vecs:v0"]
            assert (await db.aql("FOR b IN books RETURN b.y")).result == [1951]
            assert (await db.cluster_status()).shard_id == "shard-0"

    asyncio.run(scenario())


def test_async_retries_and_failover(file_server) -> None:
    path = "/v1/collections/books/documents/x"
    file_server.files[path] = b'{"urn": "urn:themis:books:x", "version": 2, "document": {}}'
    file_server.fail[path] = [503]

    async def scenario() -> None:
        async with AsyncThemisClient(["http://127.0.0.1:9", file_server.url], retry=FAST) as db:
            assert (await db.get("books", "x")).version == 2
        async with AsyncThemisClient("http://127.0.0.1:9", retry=FAST) as db:
            with pytest.raises(ThemisConnectionError):
                await db.health()

    asyncio.run(scenario())
    assert file_server.hits[path] == 2


def test_async_rag_stream_gives_its_sources_then_the_tokens() -> None:
    events = [
        {"sources": [{"urn": "urn:themis:demo:sky", "score": 0.7}]},
        {"token": " blue", "id": 1},
        {"done": True, "shard_id": "shard-1"},
    ]
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"

    async def scenario() -> tuple[list[str], AsyncInferStream]:
        stream = AsyncInferStream(httpx.Response(200, content=body.encode()))
        return [t.token async for t in stream], stream

    tokens, stream = asyncio.run(scenario())
    assert tokens == [" blue"] and [s.urn for s in stream.sources or []] == ["urn:themis:demo:sky"]
    assert stream.result is not None and stream.result.shard_id == "shard-1"


def test_a_read_whose_connection_breaks_before_the_answer_is_sent_again(reads_served) -> None:
    url, accepted = reads_served([False, True])

    async def read() -> int:
        async with AsyncThemisClient(url, retry=FAST) as db:
            return (await db.get("books", "x")).version

    assert asyncio.run(read()) == 3 and len(accepted) == 2


def test_a_write_whose_connection_breaks_is_lost_not_sent_again(reads_served) -> None:
    url, accepted = reads_served([False, True])

    async def write() -> None:
        async with AsyncThemisClient(url, retry=FAST) as db:
            await db.put("books", "x", {"t": 1})

    with pytest.raises(ThemisConnectionError) as lost:
        asyncio.run(write())
    assert lost.value.code == "connection_lost" and len(accepted) == 1
