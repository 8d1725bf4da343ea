"""Group commit: concurrent writers share one synced write, and nobody is acknowledged before
the write that carries them is durable.

The write function here is a real one that records its batches and can be held, so the tests
control when a synced write is "in progress" instead of relying on timing.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from themis_shard.storage.documents import DocumentStore, Replicated, Write
from themis_shard.storage.group_commit import GroupCommit


class HeldWrite:
    """Records each synced write's operations; the first one waits until released."""

    def __init__(self, fail: bool = False) -> None:
        self.writes: list[list] = []
        self.synced: list[bool] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def __call__(self, ops: list, synced: bool = True) -> None:
        first = not self.writes
        self.writes.append([op[1] for op in ops])
        self.synced.append(synced)
        if first:
            self.entered.set()
            assert self.release.wait(30)
            if self.fail:
                raise OSError("disk gone")


def eventually(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.005)


def writer(group: GroupCommit, lock: threading.RLock, key: bytes, published: list, errors: list):
    def run() -> None:
        with lock:
            item = group.stage([("put", key, b"v", None)], lambda: published.append(key))
        try:
            group.wait(item)
        except OSError as exc:
            errors.append((key, exc))

    return threading.Thread(target=run)


def test_writers_that_arrive_during_a_synced_write_share_the_next_one() -> None:
    write, lock, published, errors = HeldWrite(), threading.RLock(), [], []
    group = GroupCommit(write, lock, on_failure=lambda: None)
    first = writer(group, lock, b"a", published, errors)
    first.start()
    assert write.entered.wait(30)
    rest = [writer(group, lock, k, published, errors) for k in (b"b", b"c", b"d")]
    for t in rest:
        t.start()
    eventually(lambda: len(group._queue) == 3)
    assert published == []  # nobody is acknowledged while the write that carries it is running
    write.release.set()
    for t in [first, *rest]:
        t.join(30)
    assert write.writes == [[b"a"], [b"b", b"c", b"d"]]
    assert published == [b"a", b"b", b"c", b"d"]  # published in staging (commit) order
    assert errors == []


def test_a_failed_synced_write_fails_its_group_and_everything_staged_behind_it() -> None:
    write, lock, published, errors = HeldWrite(fail=True), threading.RLock(), [], []
    forgotten = []
    group = GroupCommit(write, lock, on_failure=lambda: forgotten.append(True))
    first = writer(group, lock, b"a", published, errors)
    first.start()
    assert write.entered.wait(30)
    behind = writer(group, lock, b"b", published, errors)
    behind.start()
    eventually(lambda: len(group._queue) == 1)
    write.release.set()
    first.join(30)
    behind.join(30)
    assert published == []
    assert sorted(k for k, _ in errors) == [b"a", b"b"]
    assert forgotten == [True]
    assert write.writes == [[b"a"]]  # "b" was validated against "a": never written


def test_a_store_commits_concurrently_and_keeps_every_acknowledged_write_after_reopen(tmp_path) -> None:
    store = DocumentStore(tmp_path / "db")
    failures = []

    def put(i: int) -> None:
        try:
            for j in range(20):
                store.put("c", f"k{i}-{j}", {"i": i, "j": j})
        except Exception as exc:
            failures.append(exc)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failures == []
    assert store.count("c") == 160
    store.close()
    reopened = DocumentStore(tmp_path / "db")
    try:
        assert reopened.count("c") == 160
        assert all(
            reopened.get("c", f"k{i}-{j}").document == {"i": i, "j": j} for i in range(8) for j in range(20)
        )
    finally:
        reopened.close()


def test_a_conditional_commit_sees_a_write_that_is_staged_but_not_yet_durable(tmp_path) -> None:
    store = DocumentStore(tmp_path / "db")
    try:
        held = HeldWrite()
        real = store._group._write
        store._group._write = lambda ops, synced: (held(ops, synced), real(ops, synced))
        first = threading.Thread(target=store.put, args=("c", "k", {"n": 1}))
        first.start()
        assert held.entered.wait(30)
        assert store.get("c", "k") is None  # not durable yet: readers do not see it
        second = []
        t = threading.Thread(target=lambda: second.append(store.put("c", "k", {"n": 2}, if_version=1)))
        t.start()
        eventually(lambda: len(store._group._queue) == 1)  # validated against version 1, staged
        held.release.set()
        first.join(30)
        t.join(30)
        assert second == [2]
        assert store.get("c", "k").document == {"n": 2}
    finally:
        store.close()


@pytest.mark.parametrize("second_as", ["repair", "coordinated write"])
@pytest.mark.parametrize("fails", [False, True])
def test_a_record_sent_twice_is_installed_for_the_second_sender_only_once_durable(
    tmp_path, fails, second_as
) -> None:
    """A coordinator's replication and a repair can carry the same record to an owner at once.
    The second finds it staged by the first and installs nothing, but must not call it installed
    (an owner's acknowledgement, a coordinator's own copy) before the write that carries it is
    durable, and must fail with it."""
    store = DocumentStore(tmp_path / "db")
    try:
        held = HeldWrite(fail=fails)
        real = store._group._write
        store._group._write = lambda ops, synced: (held(ops, synced), real(ops, synced))
        record = Replicated("c", "k", 1, {"n": 1}, hlc=7, origin="s-1")
        outcomes: dict[str, object] = {}

        def send(name: str) -> None:
            try:
                if name == "second" and second_as == "coordinated write":
                    outcomes[name] = store.apply_coordinated([record])[0]
                else:
                    outcomes[name] = store.apply_replicated([record])
            except OSError as exc:
                outcomes[name] = exc

        first = threading.Thread(target=send, args=("first",))
        first.start()
        assert held.entered.wait(30)
        second = threading.Thread(target=send, args=("second",))
        second.start()
        eventually(lambda: len(store._group._queue) == 1)  # behind the write in progress
        assert "second" not in outcomes  # not acknowledged while the record is not durable
        held.release.set()
        first.join(30)
        second.join(30)
        if fails:
            assert isinstance(outcomes["first"], OSError) and isinstance(outcomes["second"], OSError)
            assert store.get("c", "k") is None
        else:
            assert [c.version for c in outcomes["first"]] == [1] and outcomes["second"] == []
            assert store.stamps([("c", "k")])[0] == record.stamp
    finally:
        store.close()


def test_a_prepared_write_names_the_document_it_replaces_as_staged_not_as_durable(tmp_path) -> None:
    """A coordinator burns a failed write with the document it replaced: the one its version was
    counted from, even while a repair's install of it is still being written."""
    store = DocumentStore(tmp_path / "db")
    try:
        held = HeldWrite()
        real = store._group._write
        store._group._write = lambda ops, synced: (held(ops, synced), real(ops, synced))
        repair = threading.Thread(
            target=store.apply_replicated, args=([Replicated("c", "k", 1, {"n": 1}, hlc=7, origin="s-1")],)
        )
        repair.start()
        assert held.entered.wait(30)
        assert store.get("c", "k") is None  # not durable yet
        records, previous = store.prepare_with_previous([Write("c", "k", {"n": 2})])
        assert [r.version for r in records] == [2] and previous == [{"n": 1}]
        held.release.set()
        repair.join(30)
    finally:
        store.close()


@pytest.mark.parametrize("count", [1, 50])
def test_deletes_and_counts_stay_exact_through_group_commit(tmp_path, count: int) -> None:
    store = DocumentStore(tmp_path / "db")
    try:
        store.commit([Write("c", f"k{i}", {"i": i}) for i in range(count)])
        store.delete("c", "k0")
        assert store.count("c") == count - 1
    finally:
        store.close()


def test_a_coroutine_waiting_for_its_write_leaves_the_event_loop_free() -> None:
    import asyncio

    write, lock = HeldWrite(), threading.RLock()
    group = GroupCommit(write, lock, on_failure=lambda: None)
    published: list[bytes] = []

    async def scenario() -> None:
        with lock:
            item = group.stage([("put", b"a", b"v", None)], lambda: published.append(b"a"))
        waiting = asyncio.create_task(group.wait_async(item))
        ticks = 0
        while not write.entered.is_set():  # the loop keeps running while the write is held
            ticks += 1
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.01)
        assert not waiting.done() and published == []
        write.release.set()
        await asyncio.wait_for(waiting, 30)
        assert published == [b"a"]

    asyncio.run(scenario())
    group.close()


def test_a_group_is_synced_when_any_of_its_items_needs_it() -> None:
    """An unsynced item (its records are durable elsewhere) rides a synced group when it shares
    one, and alone it costs no fsync."""
    write, lock = HeldWrite(), threading.RLock()
    group = GroupCommit(write, lock, on_failure=lambda: None)
    with lock:
        first = group.stage([("put", b"held", b"v", None)], lambda: None)
    assert write.entered.wait(30)  # the first group is being written: the next ones queue
    with lock:
        unsynced = group.stage([("put", b"a", b"v", None)], lambda: None, synced=False)
        synced = group.stage([("put", b"b", b"v", None)], lambda: None)
    write.release.set()
    for item in (first, unsynced, synced):
        group.wait(item)
    with lock:
        alone = group.stage([("put", b"c", b"v", None)], lambda: None, synced=False)
    group.wait(alone)
    group.close()
    assert write.writes == [[b"held"], [b"a", b"b"], [b"c"]]
    assert write.synced == [True, True, False]


def test_an_unsynced_item_with_nothing_ahead_is_written_and_published_by_its_caller() -> None:
    """No fsync to keep off the caller's thread and nothing to overtake: no hand-off to the
    committer thread and back."""
    write, lock, published = HeldWrite(), threading.RLock(), []
    write.release.set()
    group = GroupCommit(write, lock, on_failure=lambda: None)
    with lock:
        item = group.stage(
            [("put", b"a", b"v", None)], lambda: published.append(threading.current_thread()), synced=False
        )
        assert item.done and published == [threading.current_thread()]  # before stage returned
    group.wait(item)
    assert write.writes == [[b"a"]] and write.synced == [False]
    assert group._thread is None  # the committer was never needed
    group.close()


def test_an_unsynced_item_whose_publishing_may_take_long_is_published_off_the_callers_thread() -> None:
    """A vector index's insert (or its persisting) must not run on the event loop."""
    write, lock, published = HeldWrite(), threading.RLock(), []
    write.release.set()
    group = GroupCommit(write, lock, on_failure=lambda: None)
    with lock:
        item = group.stage(
            [("put", b"a", b"v", None)],
            lambda: published.append(threading.current_thread().name),
            synced=False,
            by_caller=False,
        )
    group.wait(item)
    group.close()
    assert published == ["group-commit"] and write.synced == [False]


def test_a_store_publishes_by_the_caller_only_what_no_observer_watches(tmp_path) -> None:
    from themis_shard.storage.documents import StoreObserver

    class Watching(StoreObserver):
        def __init__(self) -> None:
            self.threads: list[str] = []

        def watches(self, collection: str) -> bool:
            return collection == "indexed"

        def apply(self, changes, generations) -> None:
            self.threads.append(threading.current_thread().name)

    store = DocumentStore(tmp_path / "db")
    observer = Watching()
    store.add_observer(observer)
    try:
        for collection in ("plain", "indexed"):  # a coordinator's install, its records logged elsewhere
            records = store.prepare([Write(collection, "k", {"n": 1})])
            changes = asyncio.run(store.apply_replicated_async(records, synced=False))
            assert [c.version for c in changes] == [1]
        assert observer.threads == [threading.current_thread().name, "group-commit"]
    finally:
        store.close()


def test_an_unsynced_item_staged_behind_a_write_in_progress_waits_its_turn() -> None:
    write, lock, order = HeldWrite(), threading.RLock(), []
    group = GroupCommit(write, lock, on_failure=lambda: None)
    with lock:
        first = group.stage([("put", b"held", b"v", None)], lambda: order.append(b"held"))
    assert write.entered.wait(30)
    with lock:
        behind = group.stage([("put", b"a", b"v", None)], lambda: order.append(b"a"), synced=False)
    assert not behind.done
    write.release.set()
    group.wait(behind)
    group.wait(first)
    group.close()
    assert order == [b"held", b"a"]
    assert write.writes == [[b"held"], [b"a"]]


def test_a_failed_unsynced_write_by_its_caller_fails_the_item_and_forgets_what_was_planned() -> None:
    forgotten, published = [], []

    def refuse(ops: list, synced: bool = True) -> None:
        raise OSError("disk gone")

    lock = threading.RLock()
    group = GroupCommit(refuse, lock, on_failure=lambda: forgotten.append(True))
    with lock:
        item = group.stage([("put", b"a", b"v", None)], lambda: published.append(b"a"), synced=False)
    with pytest.raises(OSError, match="disk gone"):
        group.wait(item)
    assert forgotten == [True] and published == []
    group.close()


def test_a_coroutines_commit_is_durable_and_refuses_a_stale_expected_version(tmp_path) -> None:
    from themis_shard.errors import Conflict

    store = DocumentStore(tmp_path / "db")

    async def writes():
        first = await store.commit_async([Write("c", "k", {"n": 1})])
        second = await store.commit_async([Write("c", "k", {"n": 2})], expected={("c", "k"): 1})
        with pytest.raises(Conflict):
            await store.commit_async([Write("c", "k", {"n": 3})], expected={("c", "k"): 1})
        return first, second

    try:
        first, second = asyncio.run(writes())
        assert [c.version for c in first] == [1] and [c.version for c in second] == [2]
    finally:
        store.close()
    reopened = DocumentStore(tmp_path / "db")
    try:
        assert reopened.get("c", "k").document == {"n": 2} and reopened.get("c", "k").version == 2
    finally:
        reopened.close()
