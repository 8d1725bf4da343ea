"""Spec: every acknowledged write survives `kill -9` of a real shard process."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from themis_client import NO_RETRY, NotFound, ThemisClient, ThemisConnectionError, ThemisError

pytestmark = pytest.mark.e2e


def test_acknowledged_writes_survive_sigkill_mid_stream(tmp_path, port, spawn_shard) -> None:
    url = f"http://127.0.0.1:{port}"
    data = tmp_path / "shard"
    acked: dict[str, int] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(worker: int) -> None:
        with ThemisClient(url, timeout=5, retry=NO_RETRY) as themis_db:
            i = 0
            while not stop.is_set():
                key = f"w{worker}-{i}"
                try:
                    written = themis_db.put("log", key, {"worker": worker, "i": i})
                except ThemisConnectionError:
                    return  # the shard died: this write was never acknowledged
                except ThemisError:
                    pass  # refused: not acknowledged either
                else:
                    with lock:
                        acked[key] = written.version
                i += 1

    with spawn_shard(data, port) as proc:
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(acked) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # mid-stream: writers are still sending
        proc.wait()
        stop.set()
        for t in threads:
            t.join()
    assert len(acked) >= 300

    with spawn_shard(data, port), ThemisClient(url, timeout=5) as themis_db:
        missing = [k for k in acked if not readable(themis_db, "log", k)]
        assert missing == []
        count = themis_db.collection("log").documents
        # Writes in flight at the kill may have landed without an ack; none acked may be lost.
        assert len(acked) <= count <= len(acked) + 4


def readable(themis_db: ThemisClient, collection: str, key: str) -> bool:
    try:
        themis_db.get(collection, key)
    except NotFound:
        return False
    return True


def test_vector_index_matches_the_store_after_sigkill(tmp_path, port, spawn_shard) -> None:
    url = f"http://127.0.0.1:{port}"
    data = tmp_path / "shard"
    with spawn_shard(data, port) as proc, ThemisClient(url, timeout=5) as themis_db:
        themis_db.declare_collection("v", dimension=2)
        for i in range(20):
            themis_db.put("v", f"d{i}", {"embedding": [1.0, float(i)]})
        themis_db.delete("v", "d19")
        proc.kill()
        proc.wait()
    with spawn_shard(data, port), ThemisClient(url, timeout=5) as themis_db:
        assert themis_db.collection("v").vectors == 19
        hits = themis_db.search("v", vector=[1.0, 19.0], k=1)
        assert hits.results[0].urn == "urn:themis:v:d18"
