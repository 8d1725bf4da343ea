"""One collection's FAISS index: flat, IVF or HNSW, with upserts and deletes by document key.

FAISS ids are internal labels (a counter), never document keys: every upsert gets a fresh
label and the old one is removed (flat/IVF) or tombstoned (HNSW cannot remove). Tombstones are
filtered out at search time and the index asks to be rebuilt when they pile up.

On a GPU host the CPU index stays the source of truth and a device copy serves searches. FAISS
GPU indexes do not implement ``remove_ids``, so the copy is never asked to remove: an upsert adds
the new label to it, a removed label becomes *stale* there (labels are never reused, so a stale
hit maps to no key and is dropped like a tombstone), and the copy is refreshed from the CPU index,
lazily at the next search, once the stale labels pass a fraction of the live ones or would push
the over-fetch past what a GPU search may return.

IVF needs training, which needs data: below ``ivf_train_min`` vectors it searches exactly
(a flat index), then trains with nlist ≈ 4·√n (≤ 1024, ≥ 39 points per list) and asks for retraining when the
collection grows 4× past the size it was trained on.

Scores are similarities, higher is better: cosine (vectors L2-normalised, inner product),
``ip`` raw inner product, ``l2`` the negated squared distance.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..extras import INSTALL_HINT
from ..storage.collections import CollectionConfig

try:  # faiss-cpu or faiss-gpu, from the [cpu] or [gpu] extra: both install the module faiss
    import faiss
except ImportError as e:
    raise ImportError(f"FAISS is not installed: {INSTALL_HINT}", name="faiss") from e

IVF_TRAIN_MIN = 2048
TOMBSTONE_REBUILD_FRACTION = 0.25
#: Stale labels in a device copy (removed on the CPU, still in the copy) above this fraction of
#: the live entries make the next search refresh the copy: each stale label costs one over-fetch.
DEVICE_STALE_REFRESH_FRACTION = 0.05
#: Below this many stale labels the copy is never refreshed for staleness alone.
DEVICE_STALE_MIN = 64


def gpu_count() -> int:
    try:
        return faiss.get_num_gpus()
    except AttributeError:  # faiss-cpu builds lack the symbol on some versions
        return 0


class DeviceCopy(Protocol):
    """What a device copy of a FAISS index offers: adds and searches, never removals."""

    ntotal: int

    def add_with_ids(self, x: np.ndarray, ids: np.ndarray) -> None: ...

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...


class DeviceCopier(Protocol):
    """Makes device copies of CPU indexes (faiss-gpu; on CPU a stand-in with GPU's limits)."""

    #: The largest k one search on the device may ask for.
    max_k: int

    def copy(self, index: Any) -> DeviceCopy: ...


class FaissGpu:
    """Copies indexes to one CUDA device with faiss-gpu; one resource object per shard.

    A StandardGpuResources is not thread-safe (its scratch memory and streams are shared), and
    collections are searched from several threads: every use of it goes through one lock.
    """

    max_k = 2048  # GPU k-selection limit in FAISS's GPU indexes

    def __init__(self, device: int = 0) -> None:
        self.device = device
        self._resources = faiss.StandardGpuResources()
        self._lock = threading.Lock()

    def copy(self, index: Any) -> DeviceCopy:
        with self._lock:
            return _Serialized(faiss.index_cpu_to_gpu(self._resources, self.device, index), self._lock)


class _Serialized:
    """A device index whose calls hold its resources' lock."""

    def __init__(self, index: Any, lock: threading.Lock) -> None:
        self._index, self._lock = index, lock

    @property
    def ntotal(self) -> int:
        return self._index.ntotal

    def add_with_ids(self, x: np.ndarray, ids: np.ndarray) -> None:
        with self._lock:
            self._index.add_with_ids(x, ids)

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            return self._index.search(x, k)


@dataclass(frozen=True)
class Hit:
    key: str
    score: float


class VectorIndex:
    def __init__(self, config: CollectionConfig, device: DeviceCopier | None = None) -> None:
        if config.dimension is None:
            raise ValueError("a vector index needs a dimension")
        self.config = config
        self.dimension = config.dimension
        # HNSW has no GPU form in FAISS: it stays on the CPU.
        self.device = device if config.index != "hnsw" else None
        self._next_label = 1
        self._label_key: dict[int, str] = {}
        self._key_label: dict[str, int] = {}
        self._tombstones: set[int] = set()
        self._trained_at = 0
        self._index = self._new_index(trained_size=0)  # the source of truth, always on the CPU
        self._copy: DeviceCopy | None = None  # None: (re)made from _index at the next search
        self._stale: set[int] = set()  # labels still in _copy but no longer live
        self.device_refreshes = 0

    @property
    def use_gpu(self) -> bool:
        return self.device is not None

    # -- construction ------------------------------------------------------------------------
    @property
    def _faiss_metric(self) -> int:
        return faiss.METRIC_L2 if self.config.metric == "l2" else faiss.METRIC_INNER_PRODUCT

    def _new_index(self, trained_size: int, training: np.ndarray | None = None):
        d, cfg = self.dimension, self.config
        if cfg.index == "hnsw":
            inner = faiss.IndexHNSWFlat(d, cfg.hnsw_m, self._faiss_metric)
            inner.hnsw.efConstruction = max(40, cfg.hnsw_m * 2)
            inner.hnsw.efSearch = cfg.hnsw_ef_search
            return faiss.IndexIDMap2(inner)
        if cfg.index == "ivf" and training is not None and len(training) >= IVF_TRAIN_MIN:
            # ≈4·√n lists, but ≥ 39 training points per list (FAISS's k-means minimum).
            nlist = cfg.nlist or max(16, min(1024, int(4 * math.sqrt(len(training))), len(training) // 39))
            quantizer = faiss.IndexFlat(d, self._faiss_metric)
            ivf = faiss.IndexIVFFlat(quantizer, d, nlist, self._faiss_metric)
            ivf.train(training)
            ivf.nprobe = min(cfg.nprobe, nlist)
            self._trained_at = trained_size
            return ivf
        return faiss.IndexIDMap2(faiss.IndexFlat(d, self._faiss_metric))

    def _device_copy(self, fetch: int) -> DeviceCopy | None:
        """The device copy to search for ``fetch`` results, refreshed if due; None = search the CPU."""
        if self.device is None or fetch > self.device.max_k:
            return None
        live = len(self._key_label)
        too_stale = len(self._stale) > max(DEVICE_STALE_MIN, DEVICE_STALE_REFRESH_FRACTION * live)
        if self._copy is None or too_stale or fetch + len(self._stale) > self.device.max_k:
            self._copy = self.device.copy(self._index)
            self._stale.clear()
            self.device_refreshes += 1
        return self._copy

    def _drop_copy(self) -> None:
        self._copy = None
        self._stale.clear()

    @property
    def kind(self) -> str:
        """The structure actually searched (an untrained IVF searches flat)."""
        if self.config.index == "ivf" and self._trained_at == 0:
            return "flat"
        return self.config.index

    # -- data --------------------------------------------------------------------------------
    def prepare(self, vectors: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dimension)
        if self.config.metric == "cosine":
            norms = np.linalg.norm(x, axis=1, keepdims=True)
            x = x / np.where(norms == 0, 1.0, norms)
        return x

    def __len__(self) -> int:
        return len(self._key_label)

    def __contains__(self, key: str) -> bool:
        return key in self._key_label

    def upsert(self, keys: list[str], vectors: np.ndarray) -> None:
        if not keys:
            return
        self.remove(keys)
        x = self.prepare(vectors)
        labels = np.arange(self._next_label, self._next_label + len(keys), dtype=np.int64)
        self._next_label += len(keys)
        self._index.add_with_ids(x, labels)
        if self._copy is not None:
            self._copy.add_with_ids(x, labels)
        for key, label in zip(keys, labels.tolist(), strict=True):
            self._label_key[label] = key
            self._key_label[key] = label

    def remove(self, keys: Iterable[str]) -> None:
        labels = [self._key_label.pop(k) for k in keys if k in self._key_label]
        if not labels:
            return
        for label in labels:
            del self._label_key[label]
        if self.config.index == "hnsw":
            self._tombstones.update(labels)
        else:
            self._index.remove_ids(np.asarray(labels, dtype=np.int64))
            if self._copy is not None:  # never remove_ids on a device copy: stale until refreshed
                self._stale.update(labels)

    @property
    def wants_rebuild(self) -> bool:
        """True when a rebuild would pay off: many tombstones, or IVF outgrew its training."""
        live = len(self._key_label)
        if self._tombstones and len(self._tombstones) > TOMBSTONE_REBUILD_FRACTION * max(live, 1):
            return True
        if self.config.index == "ivf":
            if self._trained_at == 0:
                return live >= IVF_TRAIN_MIN
            return live >= 4 * self._trained_at
        return False

    def rebuild(self, keys: list[str], vectors: np.ndarray) -> None:
        """Replace everything with exactly these entries (trains IVF when big enough)."""
        x = self.prepare(vectors) if len(keys) else np.zeros((0, self.dimension), np.float32)
        self._label_key.clear()
        self._key_label.clear()
        self._tombstones.clear()
        self._trained_at = 0
        self._next_label = 1
        self._index = self._new_index(len(keys), training=x if self.config.index == "ivf" else None)
        self._drop_copy()  # labels restart at 1: the old copy's labels would alias
        if len(keys):
            labels = np.arange(1, len(keys) + 1, dtype=np.int64)
            self._index.add_with_ids(x, labels)
            self._next_label = len(keys) + 1
            for key, label in zip(keys, labels.tolist(), strict=True):
                self._label_key[label] = key
                self._key_label[key] = label

    def search(self, query: np.ndarray, k: int) -> list[Hit]:
        """Top-k live entries for one query vector."""
        live = len(self._key_label)
        if live == 0 or k <= 0:
            return []
        q = self.prepare(query)
        fetch = min(k + len(self._tombstones), live + len(self._tombstones))
        copy = self._device_copy(fetch)
        if copy is None:
            scores, labels = self._index.search(q, fetch)
        else:
            scores, labels = copy.search(q, min(fetch + len(self._stale), copy.ntotal))
        hits: list[Hit] = []
        for score, label in zip(scores[0].tolist(), labels[0].tolist(), strict=True):
            key = self._label_key.get(label)
            if key is None:  # -1 (not enough results), a tombstone or a stale device label
                continue
            hits.append(Hit(key, -score if self.config.metric == "l2" else score))
            if len(hits) == k:
                break
        return hits

    # -- persistence -------------------------------------------------------------------------
    def dumps(self) -> tuple[bytes, dict]:
        blob = faiss.serialize_index(self._index).tobytes()
        meta = {
            "next_label": self._next_label,
            "labels": {str(label): key for label, key in self._label_key.items()},
            "tombstones": sorted(self._tombstones),
            "trained_at": self._trained_at,
            "config": self.config.model_dump(mode="json"),
        }
        return blob, meta

    @classmethod
    def loads(
        cls, config: CollectionConfig, blob: bytes, meta: dict, device: DeviceCopier | None = None
    ) -> VectorIndex:
        if meta.get("config") != config.model_dump(mode="json"):
            raise ValueError("persisted index was built for other collection settings")
        self = cls(config, device=device)
        self._index = faiss.deserialize_index(np.frombuffer(blob, dtype=np.uint8))
        self._next_label = int(meta["next_label"])
        self._label_key = {int(label): key for label, key in meta["labels"].items()}
        self._key_label = {key: label for label, key in self._label_key.items()}
        self._tombstones = set(meta["tombstones"])
        self._trained_at = int(meta["trained_at"])
        return self
