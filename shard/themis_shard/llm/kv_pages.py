"""PagedKVCache accounting: the KV cache counted in fixed-size pages (pure, no llama.cpp).

llama.cpp places a sequence's cells anywhere in its unified cache; what it cannot do is tell us
in advance whether the next batch fits. So the scheduler keeps its own ledger: every sequence
holds ``ceil(cells / page_size)`` pages, the ledger never hands out more pages than the cache
has cells, and so a batch the scheduler accepted always finds its KV slots. Admission asks
``can_fit``; growth that does not fit is the scheduler's cue to preempt.
"""

from __future__ import annotations

from collections.abc import Hashable


def pages_for(cells: int, page_size: int) -> int:
    return -(-cells // page_size)


class PageLedger:
    """Pages held per sequence over a cache of ``n_cells`` cells."""

    def __init__(self, n_cells: int, page_size: int) -> None:
        if page_size < 1 or n_cells < page_size:
            raise ValueError("the cache must hold at least one page")
        self.page_size = page_size
        self.total_pages = n_cells // page_size
        self._held: dict[Hashable, int] = {}
        self._used = 0

    @property
    def used_pages(self) -> int:
        return self._used

    @property
    def free_pages(self) -> int:
        return self.total_pages - self._used

    @property
    def capacity_cells(self) -> int:
        return self.total_pages * self.page_size

    def held(self, seq: Hashable) -> int:
        return self._held.get(seq, 0)

    def extra_pages(self, seq: Hashable, cells: int) -> int:
        """Pages ``seq`` still needs to hold ``cells`` cells in total."""
        return max(0, pages_for(cells, self.page_size) - self.held(seq))

    def can_fit(self, seq: Hashable, cells: int) -> bool:
        return self.extra_pages(seq, cells) <= self.free_pages

    def grow(self, seq: Hashable, cells: int) -> bool:
        """Hold enough pages for ``cells`` cells; False (and nothing changes) when they are not free."""
        extra = self.extra_pages(seq, cells)
        if extra > self.free_pages:
            return False
        if extra:
            self._held[seq] = self.held(seq) + extra
            self._used += extra
        return True

    def release(self, seq: Hashable) -> int:
        """Free every page of ``seq``; returns how many."""
        n = self._held.pop(seq, 0)
        self._used -= n
        return n
