"""Vector indexes of all collections, kept consistent with the document store.

The catalog observes the store: it validates embeddings before a commit (so a bad vector
rejects the whole write) and applies committed changes to the in-memory FAISS index after.

Crash consistency: the store bumps a per-collection generation counter in the same atomic
batch as every document write. An index file records the generation it reflects; on start an
index whose generation equals the store's is loaded as is (fast path after a clean shutdown
or a recent persist), anything else is rebuilt from the documents — the store is the source of
truth, so the index can never serve deleted or stale vectors after a crash.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from themis_core.data_format import UNMARKED

from ..errors import BadRequest
from ..storage import codec
from ..storage.collections import CollectionConfig
from ..storage.documents import Change, DocumentStore, StoredDocument, StoreObserver, Write
from .filters import matches, validate_filter
from .index import DeviceCopier, FaissGpu, Hit, VectorIndex, gpu_count

#: The index file layout (header, meta, FAISS blob); another format is rebuilt from the store.
INDEX_FORMAT = 1

log = logging.getLogger(__name__)

EMBEDDING_FIELD = "embedding"
_HEADER = struct.Struct(">I")


def embedding_of(document: dict[str, Any] | None) -> list[float] | None:
    if document is None:
        return None
    value = document.get(EMBEDDING_FIELD)
    return value if isinstance(value, list) else None


def _decode(body: bytes) -> dict[str, Any]:
    """A stored document for its embedding: orjson (about nine times json's speed on a 384-d
    vector; the same doubles, so the same float32s), json for what orjson refuses."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


def check_vector(vector: Any, dimension: int) -> list[float]:
    if not isinstance(vector, list):
        raise BadRequest(f"'{EMBEDDING_FIELD}' must be a list of {dimension} numbers", code="invalid_vector")
    codec.check_finite(vector)
    if len(vector) != dimension:
        raise BadRequest(
            f"vector has dimension {len(vector)}; the collection expects {dimension}",
            code="dimension_mismatch",
        )
    return vector


class VectorCatalog(StoreObserver):
    def __init__(
        self,
        store: DocumentStore,
        directory: Path,
        *,
        use_gpu: bool = False,
        device: DeviceCopier | None = None,
        persist_every: int = 10_000,
    ) -> None:
        """``device`` serves searches from device copies (``use_gpu``: faiss-gpu's, made here)."""
        self.store = store
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.device = device if device is not None else (FaissGpu() if use_gpu and gpu_count() > 0 else None)
        self.use_gpu = self.device is not None
        self.persist_every = persist_every
        self._indexes: dict[str, VectorIndex] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._dirty: dict[str, int] = {}
        for config in store.collections():
            if config.indexed:
                self._open(config)
        store.add_observer(self)

    # -- lifecycle ---------------------------------------------------------------------------
    def _path(self, collection: str) -> Path:
        return self.directory / f"{collection}.index"

    def _open(self, config: CollectionConfig) -> None:
        index = self._load(config)
        if index is None:
            index = VectorIndex(config, device=self.device)
            self._rebuild(index, config.name)
        self._indexes[config.name] = index
        self._locks.setdefault(config.name, threading.Lock())
        self._dirty[config.name] = 0

    def _load(self, config: CollectionConfig) -> VectorIndex | None:
        path = self._path(config.name)
        if not path.exists():
            return None
        try:
            raw = path.read_bytes()
            (meta_len,) = _HEADER.unpack_from(raw)
            meta = json.loads(raw[_HEADER.size : _HEADER.size + meta_len])
            if meta.get("format", UNMARKED) != INDEX_FORMAT:  # derived data: rebuilt, never misread
                log.info("vector index %s has format %s; rebuilding", config.name, meta.get("format"))
                return None
            if meta.get("generation") != self.store.generation(config.name):
                log.info("vector index %s is behind the store; rebuilding", config.name)
                return None
            return VectorIndex.loads(config, raw[_HEADER.size + meta_len :], meta, device=self.device)
        except Exception as exc:  # a torn or foreign file is rebuilt, never trusted
            log.warning("vector index %s unreadable (%s); rebuilding", config.name, exc)
            return None

    def _rebuild(self, index: VectorIndex, collection: str) -> None:
        keys: list[str] = []
        vectors: list[list[float]] = []
        for key, body in self.store.scan_bodies(collection):
            vec = embedding_of(_decode(body))
            if vec is not None and len(vec) == index.dimension:
                keys.append(key)
                vectors.append(vec)
        array = np.asarray(vectors, dtype=np.float32).reshape(-1, index.dimension)
        index.rebuild(keys, array)

    def persist(self, collection: str) -> None:
        index = self._indexes.get(collection)
        if index is None:
            return
        with self._locks[collection]:
            blob, meta = index.dumps()
            meta["generation"] = self.store.generation(collection)
            meta["format"] = INDEX_FORMAT
            self._dirty[collection] = 0
        header = json.dumps(meta).encode()
        path = self._path(collection)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            fh.write(_HEADER.pack(len(header)) + header + blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def close(self) -> None:
        for collection in list(self._indexes):
            self.persist(collection)

    def declare(self, config: CollectionConfig) -> None:
        """(Re)build the index of a collection that was just declared or changed."""
        if not config.indexed:
            self._indexes.pop(config.name, None)
            return
        current = self._indexes.get(config.name)
        if current is None or current.config != config:
            index = VectorIndex(config, device=self.device)
            self._rebuild(index, config.name)
            self._locks.setdefault(config.name, threading.Lock())
            with self._locks[config.name]:
                self._indexes[config.name] = index
            self._dirty[config.name] = 0

    # -- store observer ----------------------------------------------------------------------
    def validate(self, config: CollectionConfig, write: Write) -> None:
        vector = embedding_of(write.document) if write.document is not None else None
        if write.document is not None and EMBEDDING_FIELD in write.document and vector is None:
            raise BadRequest(f"'{EMBEDDING_FIELD}' must be a list of numbers", code="invalid_vector")
        if vector is not None:
            if config.dimension is None:
                codec.check_finite(vector)
            else:
                check_vector(vector, config.dimension)

    def watches(self, collection: str) -> bool:
        return collection in self._indexes

    def apply(self, changes: list[Change], generations: dict[str, int]) -> None:
        by_collection: dict[str, list[Change]] = {}
        for change in changes:
            if change.collection in self._indexes:
                by_collection.setdefault(change.collection, []).append(change)
        for collection, group in by_collection.items():
            index = self._indexes[collection]
            with self._locks[collection]:
                # Last write per key wins within one commit.
                final: dict[str, list[float] | None] = {}
                for change in group:
                    final[change.key] = embedding_of(change.document)
                index.remove([k for k, v in final.items() if v is None])
                keys = [k for k, v in final.items() if v is not None]
                if keys:
                    index.upsert(keys, np.asarray([final[k] for k in keys], dtype=np.float32))
                if index.wants_rebuild:
                    started = time.perf_counter()
                    self._rebuild(index, collection)
                    log.info(
                        "rebuilt %s index (%s, %d vectors) in %.2fs",
                        collection,
                        index.kind,
                        len(index),
                        time.perf_counter() - started,
                    )
            self._dirty[collection] = self._dirty.get(collection, 0) + len(group)
            if self._dirty[collection] >= self.persist_every:
                try:
                    self.persist(collection)
                except OSError as exc:  # after a durable write: never its failure (a full disk)
                    log.warning("vector index %s not persisted (%s); it is rebuilt on start", collection, exc)

    # -- queries -----------------------------------------------------------------------------
    def index(self, collection: str) -> VectorIndex:
        config = self.store.collection(collection)
        index = self._indexes.get(collection)
        if index is None or not config.indexed:
            raise BadRequest(
                f"collection {collection!r} has no vector index: declare it with "
                f"PUT /v1/collections/{collection} and a dimension",
                code="not_indexed",
            )
        return index

    def size(self, collection: str) -> int:
        index = self._indexes.get(collection)
        return 0 if index is None else len(index)

    def search(
        self, collection: str, vector: list[float], k: int, flt: dict[str, Any] | None = None
    ) -> list[tuple[Hit, StoredDocument]]:
        """Top-k documents by similarity that match ``flt`` (over-fetching until k match)."""
        index = self.index(collection)
        check_vector(vector, index.dimension)
        flt = validate_filter(flt)
        query = np.asarray(vector, dtype=np.float32)
        fetch = k if not flt else k * 4
        while True:
            with self._locks[collection]:
                hits = index.search(query, fetch)
                total = len(index)
            results: list[tuple[Hit, StoredDocument]] = []
            for hit in hits:
                doc = self.store.get(collection, hit.key)
                if doc is None or (flt and not matches(doc.document, flt)):
                    continue
                results.append((hit, doc))
                if len(results) == k:
                    return results
            if len(hits) < fetch or fetch >= total:
                return results
            fetch = min(fetch * 4, total)
