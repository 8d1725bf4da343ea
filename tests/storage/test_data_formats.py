"""Data-format versions: every store a shard keeps says which layout it holds. A shard refuses
data newer than itself with a message naming the store and both versions (changing nothing),
and moves older data forward step by step; unmarked data (written by 0.1.0) is format 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rocksdict import WriteBatch
from themis_core.data_format import MARKER, FormatTooNew, directory_format, stamp
from themis_core.plan import ClusterPlan, single_shard_plan
from themis_shard.storage import codec
from themis_shard.storage.documents import DocumentStore
from themis_shard.storage.formats import CURRENT, open_formats, stored_formats


def old_store(path) -> None:
    """A store as Themis 0.1.0 left it: documents, no format markers."""
    store = DocumentStore(path)
    store.put("books", "dune", {"title": "Dune"})
    store.put("books", "emma", {"title": "Emma"})
    store.close()


def test_a_new_store_is_marked_with_the_current_format_of_every_column_family(tmp_path):
    store = DocumentStore(tmp_path)
    assert open_formats(store) == dict(CURRENT)
    assert stored_formats(store) == dict(CURRENT)
    store.close()


def test_an_unmarked_store_from_the_previous_release_is_migrated_and_keeps_its_documents(tmp_path):
    old_store(tmp_path)
    store = DocumentStore(tmp_path)
    assert set(stored_formats(store).values()) == {None}
    open_formats(store)
    assert stored_formats(store) == dict(CURRENT)
    assert (
        store.get("books", "dune").document == {"title": "Dune"} and store.get("books", "dune").version == 1
    )
    store.close()


def test_a_column_family_newer_than_this_code_is_refused_by_name_and_nothing_changes(tmp_path):
    store = DocumentStore(tmp_path)
    open_formats(store)
    meta = store.column_family("meta")[0]
    meta[b"format:intents"] = (CURRENT["intents"] + 1).to_bytes(8, "big")
    before = stored_formats(store)
    with pytest.raises(FormatTooNew) as err:
        open_formats(store)
    message = str(err.value)
    assert "column family 'intents'" in message
    assert f"data format {CURRENT['intents'] + 1}" in message and f"up to {CURRENT['intents']}" in message
    assert stored_formats(store) == before
    store.close()


def test_older_column_families_are_migrated_one_recorded_step_at_a_time(tmp_path):
    """A format-2 docs layout (every title upper-cased) reached from format 1 by one step."""
    old_store(tmp_path)
    store = DocumentStore(tmp_path)
    steps = []

    def upper_titles(s: DocumentStore, batch: WriteBatch) -> None:
        docs, handle, _, _ = s.column_family("docs")
        for key, raw in docs.items():
            _, document = codec.decode(raw)
            steps.append(key)
            document["title"] = document["title"].upper()
            batch.put(key, codec.encode(codec.decode_stamp(raw), document, 1 << 20), handle)

    current = {**CURRENT, "docs": 2}
    assert open_formats(store, current, {("docs", 1): upper_titles})["docs"] == 2
    assert stored_formats(store)["docs"] == 2 and len(steps) == 2
    assert store.get("books", "emma").document == {"title": "EMMA"}
    open_formats(store, current, {("docs", 1): upper_titles})  # done: not again
    assert len(steps) == 2
    store.close()


def test_directory_stores_are_stamped_and_a_newer_one_is_refused(tmp_path):
    fresh = tmp_path / "fresh"
    assert directory_format(fresh, "cache", 3) == 3
    assert json.loads((fresh / MARKER).read_text()) == {"format": 3}
    old = tmp_path / "old"
    old.mkdir()
    (old / "a.kvp").write_bytes(b"x")  # written by 0.1.0: unmarked
    assert directory_format(old, "cache", 3) == 1
    newer = tmp_path / "newer"
    stamp(newer, 4)
    with pytest.raises(FormatTooNew, match="cache has data format 4, but this Themis reads formats up to 3"):
        directory_format(newer, "cache", 3)


def test_a_plan_of_format_1_is_written_as_0_1_0_wrote_it_and_a_newer_plan_is_refused():
    plan = single_shard_plan("shard-0", "http://127.0.0.1:1")
    raw = json.loads(plan.to_json())
    assert "format" not in raw  # 0.1.0 shards (unknown fields forbidden) read it mid-upgrade
    assert ClusterPlan.from_json(plan.to_json()) == plan
    with pytest.raises(FormatTooNew, match="the cluster plan has data format 2"):
        ClusterPlan.from_json(json.dumps({**raw, "format": 2}))


def test_a_shard_over_newer_data_stops_at_start_with_the_reason(tmp_path):
    store = DocumentStore(tmp_path / "documents")
    open_formats(store)
    meta, _, _, _ = store.column_family("meta")
    meta[b"format:docs"] = (CURRENT["docs"] + 1).to_bytes(8, "big")
    del meta  # a column family handle keeps the DB lock
    store.close()
    env = {**os.environ, "THEMIS_LLM_ENABLED": "false"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "themis_shard",
            "--shard-id",
            "s0",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "column family 'docs' has data format 2, but this Themis reads formats up to 1" in done.stderr
