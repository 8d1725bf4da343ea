"""Replication batching: concurrent coordinated writes to one peer share requests, and each
message still gets exactly the answer a single push would have got.

The peer is an httpx mock transport whose handler can hold a request open, so "a request is in
flight" is a state the test sets up, not a timing."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from themis_shard.cluster.replication.batching import ReplicationBatcher
from themis_shard.cluster.settings import ClusterSettings
from themis_shard.cluster.transport.remote import PeerError, PeerUnavailable, RemoteExecutor


class Peer:
    def __init__(self, hold_first: bool = False) -> None:
        self.requests: list[tuple[str, list]] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.hold_first = hold_first
        self.answer = lambda message: {"applied": len(message["items"]), "newer": []}
        self.batch_route = True
        self.broken = False

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        path = request.url.path
        if self.broken:
            raise httpx.ReadTimeout("peer went away", request=request)
        if path == "/internal/replicate/batch" and not self.batch_route:
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "Not Found"}})
        messages = body["messages"] if path.endswith("/batch") else [body]
        self.requests.append((path, [m["items"][0]["key"] for m in messages]))
        if self.hold_first and len(self.requests) == 1:
            self.entered.set()
            await self.release.wait()
        if path.endswith("/batch"):
            return httpx.Response(200, json={"results": [self.answer(m) for m in messages]})
        return httpx.Response(200, json=self.answer(body))


def message(key: str) -> dict:
    items = [{"collection": "c", "key": key, "version": 1, "document": {}, "hlc": 1, "origin": "s-0"}]
    return {"items": items, "fence": {"epoch": 1, "coordinator": "s-0"}}


def batcher(peer: Peer, max_in_flight: int = 1) -> ReplicationBatcher:
    executor = RemoteExecutor(ClusterSettings(), lambda p: f"http://{p}", transport=httpx.MockTransport(peer))
    return ReplicationBatcher(executor, max_in_flight=max_in_flight)


async def until(condition) -> None:
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("condition never held")


def test_messages_sent_while_a_request_is_in_flight_leave_together_in_the_next_one() -> None:
    async def scenario() -> None:
        peer = Peer(hold_first=True)
        b = batcher(peer)
        first = asyncio.create_task(b.call("p", message("a")))
        await peer.entered.wait()
        rest = [asyncio.create_task(b.call("p", message(k))) for k in ("b", "c", "d")]
        await until(lambda: len(b._queues["p"]) == 3)
        peer.release.set()
        answers = await asyncio.gather(first, *rest)
        assert peer.requests == [
            ("/internal/replicate/batch", ["a"]),
            ("/internal/replicate/batch", ["b", "c", "d"]),
        ]
        assert answers == [{"applied": 1, "newer": []}] * 4

    asyncio.run(scenario())


def test_each_message_gets_its_own_answer_and_a_refused_one_its_own_error() -> None:
    async def scenario() -> None:
        peer = Peer(hold_first=True)
        refused = {"error": {"status": 409, "code": "stale_epoch", "message": "epoch 1 < 2"}}
        peer.answer = lambda m: refused if m["items"][0]["key"] == "c" else {"applied": 1, "newer": []}
        b = batcher(peer)
        first = asyncio.create_task(b.call("p", message("a")))
        await peer.entered.wait()
        rest = [asyncio.create_task(b.call("p", message(k))) for k in ("b", "c")]
        await until(lambda: len(b._queues["p"]) == 2)
        peer.release.set()
        answers = await asyncio.gather(first, *rest, return_exceptions=True)
        assert answers[:2] == [{"applied": 1, "newer": []}] * 2
        assert isinstance(answers[2], PeerError)
        assert (answers[2].status, answers[2].code) == (409, "stale_epoch")

    asyncio.run(scenario())


def test_a_transport_failure_fails_every_message_of_the_request_as_unavailable() -> None:
    async def scenario() -> None:
        peer = Peer()
        peer.broken = True
        b = batcher(peer, max_in_flight=2)
        answers = await asyncio.gather(*(b.call("p", message(k)) for k in "abc"), return_exceptions=True)
        assert all(isinstance(a, PeerUnavailable) and a.reason == "timeout" for a in answers)

    asyncio.run(scenario())


@pytest.mark.parametrize("messages", [1, 3])
def test_a_peer_without_the_batch_route_gets_single_pushes(messages: int) -> None:
    async def scenario() -> None:
        peer = Peer()
        peer.batch_route = False
        b = batcher(peer)
        keys = "abc"[:messages]
        answers = await asyncio.gather(*(b.call("p", message(k)) for k in keys))
        assert answers == [{"applied": 1, "newer": []}] * messages
        assert sorted(k for path, [k] in peer.requests if path == "/internal/replicate") == list(keys)

    asyncio.run(scenario())
