"""Group commit: concurrent writers share one RocksDB ``WriteBatch`` and one synced write.

A writer stages its operations (under the store's commit lock, so staging order is commit
order) and then waits — a thread on a condition, a coroutine on a future, so the event loop is
free meanwhile. One committer thread takes every staged item, writes them all as one batch
(one WAL append, one fsync), publishes each item's effects in staging order, and wakes the
writers. Items staged while a write is in progress form the next group. An item is acknowledged only after the
synced write that holds it returned, so an acknowledged write survives ``kill -9`` exactly as
before; what changes is how many writes one fsync carries: at N concurrent writers, about N.

An item may be staged unsynced (``synced=False``): a coordinator's install whose records an
in-flight entry already holds durably (``storage/inflight.py``). A group of such items only is
written without an fsync (the OS has it, so it survives ``kill -9``; the next synced group
carries it to disk, and the WAL keeps it in order before anything written later). Staged with
nothing queued or being written, such an item is written at once by its caller: there is no
fsync to keep off the caller's thread, and nothing it could overtake — unless publishing it may
take long (a vector index's insert, or its persisting every so many changes), which stays on the
committer thread, off the event loop.

A failed write fails its whole group and every item staged after it (they were validated
against the failed items' versions): the store resets what it planned (``on_failure``) under its
commit lock, so nothing staged later builds on them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: ("put", key, value, cf handle) or ("delete", key, None, cf handle)
Op = tuple[str, bytes, bytes | None, Any]


class Ops:
    """A write batch being staged: the ``put``/``delete``/``delete_range`` calls of a ``WriteBatch``,
    recorded."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def put(self, key: bytes, value: bytes, handle: Any) -> None:
        self.ops.append(("put", key, value, handle))

    def delete(self, key: bytes, handle: Any) -> None:
        self.ops.append(("delete", key, None, handle))

    def delete_range(self, begin: bytes, end: bytes, handle: Any) -> None:
        """Every key in ``[begin, end)`` (``end`` travels as the value)."""
        self.ops.append(("delete_range", begin, end, handle))


@dataclass(eq=False)
class Staged:
    """One writer's operations and what to publish once they are durable."""

    ops: list[Op]
    publish: Callable[[], None]
    done: bool = False
    error: BaseException | None = None
    #: (loop, future) of coroutines waiting for it
    waiters: list = field(default_factory=list)
    #: False: an fsync is not needed for it (the group is synced if any item needs it)
    synced: bool = True


class GroupCommit:
    def __init__(
        self,
        write: Callable[[list[Op], bool], None],
        commit_lock: threading.RLock,
        on_failure: Callable[[], None],
    ) -> None:
        """``write`` makes the operations durable (one batch, synced unless told not to);
        ``commit_lock`` is the store's lock, held while staging and while publishing;
        ``on_failure`` forgets what the store planned on top of items that failed."""
        self._write = write
        self._commit_lock = commit_lock
        self._on_failure = on_failure
        lock = threading.Lock()
        #: the committer waits on ``_work`` (only while it sleeps is a wake needed: a committer
        #: that is writing takes the queue when it is done); threads in ``wait`` on ``_done``
        self._work = threading.Condition(lock)
        self._done = threading.Condition(lock)
        self._sleeping = False
        self._queue: list[Staged] = []
        self._writing = False
        self._closed = False
        self._thread: threading.Thread | None = None
        #: how many items the last write carried
        self.last_group_size = 0

    def stage(
        self, ops: list[Op], publish: Callable[[], None], synced: bool = True, *, by_caller: bool = True
    ) -> Staged:
        """Queue ``ops`` (call with the commit lock held, in commit order). The committer
        thread writes it with whatever else is queued when it next starts a write.
        ``by_caller=False``: ``publish`` may take long (a vector index's insert), so even an
        unsynced item with nothing ahead goes to the committer, off the caller's thread."""
        item = Staged(ops, publish, synced=synced)
        with self._work:
            if self._closed:
                raise RuntimeError("the document store is closed")
            if not synced and by_caller and not self._queue and not self._writing:
                self._write_alone(item)
                return item
            self._queue.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="group-commit", daemon=True)
                self._thread.start()
            if self._sleeping:
                self._work.notify()
        return item

    @property
    def idle(self) -> bool:
        """Nothing queued or being written: an item staged now would be written alone (a hint,
        read without the lock)."""
        return not self._queue and not self._writing

    def wait(self, item: Staged) -> None:
        """Until ``item`` is durable and published (or raise its write's error). Call without
        the commit lock: publishing needs it."""
        with self._done:
            while not item.done:
                self._done.wait()
        if item.error is not None:
            raise item.error

    async def wait_async(self, item: Staged) -> None:
        """``wait`` for a coroutine: the event loop is free while the write is in progress."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._done:
            if not item.done:
                item.waiters.append((loop, future))
        if not future.done() and not item.done:
            await future
        if item.error is not None:
            raise item.error

    def close(self) -> None:
        """Finish what is queued, then stop the committer thread."""
        with self._work:
            self._closed = True
            self._work.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._work:
                while not self._queue and not self._closed:
                    self._sleeping = True
                    self._work.wait()
                    self._sleeping = False
                if not self._queue:
                    return
                group, self._queue = self._queue, []
                self._writing = True
            self._lead(group)

    def _write_alone(self, item: Staged) -> None:
        """An unsynced item with nothing ahead of it, written by its caller (under the commit
        lock and the queue's lock, so nothing is staged or written meanwhile): a write without an
        fsync holds the GIL for its whole length in any thread, and handing it to the committer
        and back cost ~0.17 ms of waking threads and loops for ~0.04 ms of writing."""
        try:
            self._write(item.ops, False)
        except BaseException as exc:
            item.error = exc
            self._on_failure()
        else:
            self._publish([item])
        _finish([item])
        self._done.notify_all()

    def _lead(self, group: list[Staged]) -> None:
        try:
            self._write([op for item in group for op in item.ops], any(item.synced for item in group))
        except BaseException as exc:
            with self._commit_lock, self._done:
                failed = group + self._queue
                self._queue = []
                for item in failed:
                    item.error = exc
                _finish(failed)
                self._on_failure()
                self._writing = False
                self._done.notify_all()
            return
        with self._commit_lock:
            self._publish(group)
        with self._done:
            _finish(group)
            self._writing = False
            self._done.notify_all()

    def _publish(self, group: list[Staged]) -> None:
        """Each item's effects, in staging order, once the write that carries them returned
        (under the commit lock)."""
        self.last_group_size = len(group)
        for item in group:
            try:
                item.publish()
            except Exception:  # durable already: never report an applied write as failed
                log.exception("publishing a committed write failed")


def _noop() -> None:
    return None


def _finish(items: list[Staged]) -> None:
    """Mark ``items`` done, wake their coroutines — one wake-up per event loop, not per item —
    and drop what they held: a publish closure refers back to its item, and column-family
    handles in the operations keep the database's lock until collected. (Under the queue's
    lock.)"""
    woken: dict[asyncio.AbstractEventLoop, list[asyncio.Future]] = {}
    for item in items:
        item.done = True
        item.ops = []
        item.publish = _noop
        for loop, future in item.waiters:
            woken.setdefault(loop, []).append(future)
        item.waiters = []
    for loop, futures in woken.items():
        loop.call_soon_threadsafe(_resolve, futures)


def _resolve(futures: list[asyncio.Future]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)
