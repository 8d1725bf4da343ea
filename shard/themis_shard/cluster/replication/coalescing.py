"""Unfenced pushes of records to one peer, coalesced: w=1 replication and repairs.

A w=1 write is acknowledged from the coordinator's copy and reaches its other owners in the
background, as a repair. One push per write cost both sides a request each (a frame, a pass
through the route, an item of the receiver's group commit), so at 64 writers w=1 ran slower than
w=majority, whose messages :class:`~.batching.ReplicationBatcher` coalesces. Here, per peer, one
push is in flight at a time, and the records queued meanwhile leave together in the next one.

Records carry their stamps, so one push of many writes' records is applied exactly as separate
pushes would be: the higher stamp wins and a replay is a no-op, in any order. A push that fails
fails every sender in it, each with the same error (each then keeps its own records as a hint).
A push is bounded in records and in bytes (well under a peer's request limit: a refused push of
many writes' records would turn them all into hints).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

import orjson

from ...storage.documents import Replicated

#: ``push(peer, groups)``: installs each group of records on ``peer`` atomically, or raises
Push = Callable[[str, list[list[Replicated]]], Awaitable[None]]
#: a sender's records, their size on the wire, and the sender's future
_Queued = tuple[list[Replicated], int, asyncio.Future[None]]


#: a record's stamp, names and JSON framing, beside its document
RECORD_OVERHEAD = 128
#: Most bytes of records in one push request (under a peer channel's frame, far under a
#: request's limit): what a coalesced push gathers, and what ``split_by_size`` cuts to.
PUSH_MAX_BYTES = 6 << 20


def wire_size(records: list[Replicated]) -> int:
    """About how many bytes ``records`` take in a push (a prepared record's JSON is at hand)."""
    return sum(record_size(r) for r in records)


def record_size(r: Replicated) -> int:
    document = len(r.body) if r.body is not None else len(orjson.dumps(r.document)) if r.document else 0
    return RECORD_OVERHEAD + len(r.collection) + len(r.key) + document


def split_by_size(groups: list[list[Replicated]], max_bytes: int) -> list[list[Replicated]]:
    """``groups`` in order, in runs of at most ``max_bytes`` made of whole groups (a group
    larger alone). A group is what the receiver must install at once — a transaction's records
    for that peer — and one request is installed there as one atomic write."""
    runs: list[list[Replicated]] = []
    size = 0
    for group in groups:
        n = wire_size(group)
        if not runs or size + n > max_bytes:
            runs.append([])
            size = 0
        runs[-1].extend(group)
        size += n
    return [run for run in runs if run]


class PushCoalescer:
    def __init__(self, push: Push, *, max_records: int = 1024, max_bytes: int = PUSH_MAX_BYTES) -> None:
        """``push(peer, groups)`` installs records on a peer or raises; ``max_records`` and
        ``max_bytes`` bound one push (a sender's own records are one group, never split)."""
        self._push = push
        self.max_records = max_records
        self.max_bytes = max_bytes
        self._queues: dict[str, deque[_Queued]] = {}
        self._draining: dict[str, asyncio.Task] = {}
        #: records per push (the last one), for tests and curiosity
        self.last_push_size = 0

    def enqueue(self, peer: str, records: list[Replicated]) -> asyncio.Future[None]:
        """Queue ``records`` for ``peer``: the future is done once a push carried them, or holds
        the push's error."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(peer, deque()).append((records, wire_size(records), future))
        if peer not in self._draining:
            self._draining[peer] = asyncio.create_task(self._drain(peer), name=f"push-{peer}")
        return future

    async def send(self, peer: str, records: list[Replicated]) -> None:
        """Push ``records`` to ``peer`` with whatever else is queued for it."""
        await self.enqueue(peer, records)

    async def settle(self) -> None:
        """Until every push queued so far has been made (or has failed)."""
        while self._draining:
            await asyncio.gather(*list(self._draining.values()), return_exceptions=True)

    async def _drain(self, peer: str) -> None:
        queue = self._queues[peer]
        taken: list[_Queued] = []
        try:
            while queue:
                taken = [queue.popleft()]
                count, size = len(taken[0][0]), taken[0][1]
                while (
                    queue
                    and count + len(queue[0][0]) <= self.max_records
                    and size + queue[0][1] <= self.max_bytes
                ):
                    taken.append(queue.popleft())
                    count, size = count + len(taken[-1][0]), size + taken[-1][1]
                self.last_push_size = count
                try:
                    await self._push(peer, [records for records, _, _ in taken])
                except Exception as exc:
                    _settle(taken, exc)
                else:
                    _settle(taken, None)
                taken = []
        except BaseException:  # cancelled (the shard is stopping): nobody waits for an answer
            for _, _, future in [*taken, *queue]:
                future.cancel()
            queue.clear()
            raise
        finally:
            del self._draining[peer]


def _settle(taken: list[_Queued], error: Exception | None) -> None:
    for _, _, future in taken:
        if future.done():  # its sender was cancelled
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
