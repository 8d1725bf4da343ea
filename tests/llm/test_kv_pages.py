"""PagedKVCache ledger: whole pages per sequence, never more than the cache holds."""

import pytest
from themis_shard.llm.kv_pages import PageLedger, pages_for


def test_pages_round_up():
    assert [pages_for(n, 16) for n in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_grow_holds_pages_and_release_frees_them():
    ledger = PageLedger(n_cells=128, page_size=16)
    assert ledger.total_pages == 8
    assert ledger.grow("a", 17)
    assert ledger.held("a") == 2 and ledger.used_pages == 2
    assert ledger.grow("a", 32)  # still fits the two pages
    assert ledger.used_pages == 2
    assert ledger.grow("b", 16 * 6)
    assert ledger.free_pages == 0
    assert not ledger.grow("a", 33)  # needs a third page: refused, nothing changes
    assert ledger.held("a") == 2
    assert ledger.release("b") == 6
    assert ledger.grow("a", 33) and ledger.used_pages == 3


def test_capacity_is_whole_pages():
    ledger = PageLedger(n_cells=100, page_size=16)
    assert ledger.total_pages == 6 and ledger.capacity_cells == 96
    with pytest.raises(ValueError):
        PageLedger(n_cells=8, page_size=16)
