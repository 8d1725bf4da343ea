"""Coordinated replication messages to one peer, coalesced and pipelined.

Every coordinated write sends its stamped records to the other owners and waits for their
answers. One HTTP request per write costs each side a pass through the HTTP and ASGI stacks
and the receiver one synced write per message. :class:`ReplicationBatcher` keeps, per peer, at
most ``max_in_flight`` requests on the executor's pooled keep-alive connections; messages that
arrive while those are busy wait and leave together in the next one
(``POST /internal/replicate/batch``), which the receiver applies under one hold of its commit
lock and one synced write (``DocumentStore.apply_coordinated_many``). A lone writer's message
leaves at once, so batching adds no latency; under load a request carries as many messages as
arrived during one round trip.

Each message keeps its own answer: the receiver checks each message's fence and applies each
all-or-nothing, answering ``{"applied", "newer"}`` or ``{"error": {"status", "code",
"message"}}`` per message, which becomes the same result or ``PeerError`` that a single push
would have produced. A transport failure fails every message of the request with the same
``PeerUnavailable`` (each may or may not have been applied, exactly as for a single push).
A peer without the batch route (an older version during a rolling upgrade: 404/405) gets
single pushes to ``/internal/replicate`` from then on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor

BATCH_PATH = "/internal/replicate/batch"
SINGLE_PATH = "/internal/replicate"

#: Watches a message's answer: may fail the future early; returns the function ending the watch.
Watch = Callable[[asyncio.Future], Callable[[], None]]


class ReplicationBatcher:
    def __init__(self, executor: RemoteExecutor, *, max_in_flight: int = 2, max_messages: int = 256) -> None:
        self.executor = executor
        self.max_in_flight = max_in_flight
        self.max_messages = max_messages
        self._queues: dict[str, list[tuple[dict[str, Any], asyncio.Future]]] = {}
        self._in_flight: dict[str, int] = {}
        self._single: set[str] = set()  # peers that answered the batch route with 404/405
        self._tasks: set[asyncio.Task] = set()
        #: messages per request sent (the last one), for tests and curiosity
        self.last_batch_size = 0

    async def call(self, peer: str, message: dict[str, Any], watch: Watch | None = None) -> dict[str, Any]:
        """Send one message (``{"items", "fence"}``); its answer, or PeerError / PeerUnavailable.
        ``watch``, given the answer's future, may fail it early (the caller stops waiting: the
        message may still be delivered) and returns the function that ends the watch."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._queues.setdefault(peer, []).append((message, future))
        self._kick(peer)
        if watch is None:
            return await future
        stop = watch(future)
        try:
            return await future
        finally:
            stop()

    def _kick(self, peer: str) -> None:
        queue = self._queues.get(peer)
        while queue and self._in_flight.get(peer, 0) < self.max_in_flight:
            batch = queue[: self.max_messages]
            del queue[: self.max_messages]
            self._in_flight[peer] = self._in_flight.get(peer, 0) + 1
            task = asyncio.create_task(self._send(peer, batch), name=f"replicate-{peer}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, peer: str, batch: list[tuple[dict[str, Any], asyncio.Future]]) -> None:
        try:
            if peer in self._single:
                await asyncio.gather(*(self._send_one(peer, m, f) for m, f in batch))
                return
            self.last_batch_size = len(batch)
            try:
                reply = await self.executor.request(
                    peer,
                    "POST",
                    BATCH_PATH,
                    json_body={"messages": [m for m, _ in batch]},
                    idempotent=False,
                    retries=0,
                )
            except PeerError as exc:
                if exc.status in (404, 405):
                    self._single.add(peer)
                    await asyncio.gather(*(self._send_one(peer, m, f) for m, f in batch))
                    return
                _fail(batch, exc)
                return
            except PeerUnavailable as exc:
                _fail(batch, exc)
                return
            results = reply.get("results") if isinstance(reply, dict) else None
            if not isinstance(results, list) or len(results) != len(batch):
                _fail(
                    batch,
                    PeerUnavailable(peer, "bad_response", "replication batch answer of the wrong shape"),
                )
                return
            for (_, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                error = result.get("error") if isinstance(result, dict) else None
                if error is not None:
                    future.set_exception(
                        PeerError(
                            peer,
                            int(error.get("status", 400)),
                            str(error.get("code")),
                            str(error.get("message")),
                        )
                    )
                else:
                    future.set_result(result)
        except BaseException as exc:  # never leave a writer waiting
            _fail(batch, PeerUnavailable(peer, "transport_error", f"{type(exc).__name__}: {exc}"))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._in_flight[peer] -= 1
            self._kick(peer)

    async def _send_one(self, peer: str, message: dict[str, Any], future: asyncio.Future) -> None:
        try:
            reply = await self.executor.request(
                peer, "POST", SINGLE_PATH, json_body=message, idempotent=False, retries=0
            )
        except (PeerError, PeerUnavailable) as exc:
            if not future.done():
                future.set_exception(exc)
            return
        if not future.done():
            future.set_result(reply if isinstance(reply, dict) else {})


def _fail(batch: list[tuple[dict[str, Any], asyncio.Future]], exc: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(exc)
