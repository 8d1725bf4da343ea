"""The in-flight log on the write path: an entry is durable before the coordinator sends its
records, and dropping it once they are installed costs no fsync of its own (and no write of
its own when it goes in the install's batch).

(What recovery does with a leftover entry is specified with the coordinator, in
``tests/cluster/test_replication.py``.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

from themis_shard.storage.documents import DocumentStore, Write
from themis_shard.storage.inflight import InflightLog


def test_an_entry_added_from_a_coroutine_is_durable_when_the_call_returns(tmp_path) -> None:
    store = DocumentStore(tmp_path / "db")
    records = store.prepare([Write("c", "a", {"n": 1}), Write("c", "b", {"n": 2})])
    key = asyncio.run(InflightLog(store).add_async(records, []))
    store.close()
    reopened = DocumentStore(tmp_path / "db")
    try:
        [(logged, found, burns)] = InflightLog(reopened).entries()
        assert logged == key
        assert [(r.key, r.document) for r in found] == [("a", {"n": 1}), ("b", {"n": 2})]
        assert burns == []
    finally:
        reopened.close()


def test_an_entry_dropped_in_its_installs_own_write_goes_with_it_even_after_kill_9(tmp_path) -> None:
    """The unsynced install and the entry's removal are one batch: the records are installed and
    the entry is gone, or (had the write failed) neither."""
    script = textwrap.dedent(
        f"""
        import asyncio, os
        from themis_shard.storage.documents import DocumentStore, Write
        from themis_shard.storage.inflight import InflightLog
        store = DocumentStore({str(tmp_path / "db")!r})
        log = InflightLog(store)
        records = store.prepare([Write("c", "a", {{"n": 1}}), Write("c", "b", {{"n": 2}})])
        key = asyncio.run(log.add_async(records, []))
        asyncio.run(store.apply_replicated_async(records, synced=False, also=log.dropping(key)))
        os._exit(0)  # no close, no flush: as kill -9
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    reopened = DocumentStore(tmp_path / "db")
    try:
        assert InflightLog(reopened).entries() == []
        assert [reopened.get("c", k).document for k in ("a", "b")] == [{"n": 1}, {"n": 2}]
    finally:
        reopened.close()


def test_an_entry_whose_records_were_installed_already_is_still_dropped(tmp_path) -> None:
    """A repair may install the records first: nothing is left to install, and the entry goes
    anyway, without an fsync of its own."""
    store = DocumentStore(tmp_path / "db")
    try:
        log = InflightLog(store)
        records = store.prepare([Write("c", "a", {"n": 1})])
        key = asyncio.run(log.add_async(records, []))
        store.apply_replicated(records)  # the repair
        assert asyncio.run(store.apply_replicated_async(records, synced=False, also=log.dropping(key))) == []
        assert log.entries() == []
    finally:
        store.close()
