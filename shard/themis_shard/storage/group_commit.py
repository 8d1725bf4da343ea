"""Group commit: concurrent writers share one RocksDB ``WriteBatch`` and one synced write.

A writer stages its operations (under the store's commit lock, so staging order is commit
order) and then waits. The first waiter that finds no write in progress becomes the leader: it
takes every staged item, writes them all as one batch with ``sync=True`` (one WAL append, one
fsync), publishes each item's effects in staging order, and wakes the others. Items staged while
the leader's write is in progress form the next group. An item is acknowledged only after the
synced write that holds it returned, so an acknowledged write survives ``kill -9`` exactly as
before; what changes is how many writes one fsync carries: at N concurrent writers, about N.

A failed write fails its whole group and every item staged after it (they were validated
against the failed items' versions): the store resets what it planned (``on_failure``) under its
commit lock, so nothing staged later builds on them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: ("put", key, value, cf handle) or ("delete", key, None, cf handle)
Op = tuple[str, bytes, bytes | None, Any]


class Ops:
    """A write batch being staged: the ``put``/``delete`` calls of a ``WriteBatch``, recorded."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def put(self, key: bytes, value: bytes, handle: Any) -> None:
        self.ops.append(("put", key, value, handle))

    def delete(self, key: bytes, handle: Any) -> None:
        self.ops.append(("delete", key, None, handle))


@dataclass(eq=False)
class Staged:
    """One writer's operations and what to publish once they are durable."""

    ops: list[Op]
    publish: Callable[[], None]
    done: bool = False
    error: BaseException | None = None
    #: how many items the synced write that carried this one held
    group_size: int = field(default=0)


class GroupCommit:
    def __init__(
        self,
        write: Callable[[list[Op]], None],
        commit_lock: threading.RLock,
        on_failure: Callable[[], None],
    ) -> None:
        """``write`` makes the operations durable (one synced batch); ``commit_lock`` is the
        store's lock, held while staging and while publishing; ``on_failure`` forgets what the
        store planned on top of items that failed."""
        self._write = write
        self._commit_lock = commit_lock
        self._on_failure = on_failure
        self._cond = threading.Condition()
        self._queue: list[Staged] = []
        self._writing = False

    def stage(self, ops: list[Op], publish: Callable[[], None]) -> Staged:
        """Queue ``ops`` (call with the commit lock held, in commit order)."""
        item = Staged(ops, publish)
        with self._cond:
            self._queue.append(item)
        return item

    def wait(self, item: Staged) -> None:
        """Until ``item`` is durable and published (or raise its write's error). Call without
        the commit lock: the leader needs it to publish."""
        with self._cond:
            while not item.done:
                if not self._writing and self._queue:
                    group, self._queue = self._queue, []
                    self._writing = True
                    break
                self._cond.wait()
            else:
                group = []
        if group:
            self._lead(group)
        if item.error is not None:
            raise item.error

    def _lead(self, group: list[Staged]) -> None:
        try:
            self._write([op for item in group for op in item.ops])
        except BaseException as exc:
            with self._commit_lock, self._cond:
                failed = group + self._queue
                self._queue = []
                for item in failed:
                    item.error = exc
                    _finish(item)
                self._on_failure()
                self._writing = False
                self._cond.notify_all()
            return
        with self._commit_lock:
            for item in group:
                item.group_size = len(group)
                try:
                    item.publish()
                except Exception:  # durable already: never report an applied write as failed
                    log.exception("publishing a committed write failed")
        with self._cond:
            for item in group:
                _finish(item)
            self._writing = False
            self._cond.notify_all()


def _noop() -> None:
    return None


def _finish(item: Staged) -> None:
    """Mark ``item`` done and drop what it held: its publish closure refers back to it, and
    column-family handles in its operations keep the database's lock until collected."""
    item.done = True
    item.ops = []
    item.publish = _noop
