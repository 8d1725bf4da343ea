"""CPU stand-ins for GPU parts, with the GPU's limits, so GPU code paths run in tests and dry runs.

``CpuDeviceCopier`` is a :class:`themis_shard.vector.index.DeviceCopier` whose copies are CPU
clones that refuse ``remove_ids`` exactly as FAISS GPU indexes do: a test that passes with it
proves the index never asks a device copy to remove anything.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np


class RemoveRefused(RuntimeError):
    """What a FAISS GPU index answers to ``remove_ids`` (it does not implement removal)."""


class RefusingCopy:
    """A CPU clone of an index that adds and searches but, like a GPU index, cannot remove."""

    def __init__(self, index: Any) -> None:
        self._index = faiss.clone_index(index)
        self.searches = 0

    @property
    def ntotal(self) -> int:
        return self._index.ntotal

    def add_with_ids(self, x: np.ndarray, ids: np.ndarray) -> None:
        self._index.add_with_ids(x, ids)

    def search(self, x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.searches += 1
        return self._index.search(x, k)

    def remove_ids(self, ids: Any) -> int:
        raise RemoveRefused("remove_ids is not implemented for GPU indexes")


class CpuDeviceCopier:
    """Counts the copies it makes; ``max_k`` is the device's search limit (FAISS GPU: 2048)."""

    def __init__(self, max_k: int = 2048) -> None:
        self.max_k = max_k
        self.copies: list[RefusingCopy] = []

    def copy(self, index: Any) -> RefusingCopy:
        copy = RefusingCopy(index)
        self.copies.append(copy)
        return copy
