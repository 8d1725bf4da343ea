"""Derived stores carry a format too, and another format is never misread: a vector index file
of another format is rebuilt from the documents; a KV-prefix disk tier written by a newer Themis
is left alone (the cache runs from RAM) instead of stopping the shard."""

from __future__ import annotations

import json
import struct

from themis_core.data_format import MARKER, stamp
from themis_shard.llm.prefix_cache import DISK_FORMAT, PrefixCache, chain_seed
from themis_shard.storage.collections import CollectionConfig
from themis_shard.storage.documents import DocumentStore, Write
from themis_shard.vector.catalog import INDEX_FORMAT, VectorCatalog

HEADER = ">I"  # the index file's header: the meta's length (vector/catalog.py)
SEED = chain_seed("0" * 64, 16, {"type_k": 1})


def open_catalog(path):
    store = DocumentStore(path / "documents")
    catalog = VectorCatalog(store, path / "vectors")
    if not store.has_collection("c"):
        catalog.declare(store.declare_collection(CollectionConfig(name="c", dimension=2)))
    return store, catalog


def index_meta(path) -> tuple[dict, bytes]:
    raw = (path / "vectors" / "c.index").read_bytes()
    (n,) = struct.unpack_from(HEADER, raw)
    size = struct.calcsize(HEADER)
    return json.loads(raw[size : size + n]), raw[size + n :]


def test_a_vector_index_file_records_its_format_and_another_format_is_rebuilt(tmp_path):
    store, catalog = open_catalog(tmp_path)
    store.commit([Write("c", f"k{i}", {"embedding": [float(i), 1.0]}) for i in range(10)])
    catalog.close()
    store.close()
    meta, blob = index_meta(tmp_path)
    assert meta["format"] == INDEX_FORMAT
    header = json.dumps({**meta, "format": INDEX_FORMAT + 1}).encode()
    (tmp_path / "vectors" / "c.index").write_bytes(struct.pack(HEADER, len(header)) + header + blob[:5])
    store, catalog = open_catalog(tmp_path)  # a truncated blob would not load: it was not read
    try:
        assert len(catalog.index("c")) == 10
    finally:
        catalog.close()
        store.close()
    assert index_meta(tmp_path)[0]["format"] == INDEX_FORMAT


def test_a_prefix_disk_tier_written_by_a_newer_themis_is_not_used(tmp_path):
    stamp(tmp_path, DISK_FORMAT + 1)
    c = PrefixCache(seed=SEED, block=16, disk_dir=tmp_path)
    assert c.disk_dir is None
    c.put([1] * 16, b"a" * 10)
    assert json.loads((tmp_path / MARKER).read_text()) == {"format": DISK_FORMAT + 1}  # untouched


def test_a_new_prefix_disk_tier_is_stamped_with_its_format(tmp_path):
    PrefixCache(seed=SEED, block=16, disk_dir=tmp_path / "kv")
    assert json.loads((tmp_path / "kv" / MARKER).read_text()) == {"format": DISK_FORMAT}
