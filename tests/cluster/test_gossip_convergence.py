"""Push-pull gossip converges within ⌈log_f N⌉ + 2 rounds on average (pure simulation, real merge code)."""

from __future__ import annotations

import pytest

from .gossip_sim import expected_bound, measure


def test_the_bound_is_ceil_log_f_n_plus_two():
    assert [expected_bound(n, 3) for n in (3, 16, 100, 1000)] == [3, 5, 7, 9]
    assert expected_bound(16, 4) == 4


@pytest.mark.parametrize(("n", "trials"), [(16, 30), (100, 15), (1000, 4)])
def test_an_announcement_reaches_every_shard_within_the_bound_on_average(n, trials):
    stats = measure(n, fanout=3, trials=trials, seed=n)
    assert stats.mean_rounds <= stats.bound, stats


@pytest.mark.parametrize(("n", "trials"), [(16, 10), (100, 3)])
def test_all_heartbeats_and_announcements_agree_within_the_bound(n, trials):
    # N concurrent updates (every shard's heartbeat + own announcement): full anti-entropy.
    stats = measure(n, fanout=3, trials=trials, seed=7, mode="agree")
    assert stats.mean_rounds <= stats.bound, stats


def test_ten_percent_lost_exchanges_still_converge_within_the_bound():
    stats = measure(100, fanout=3, trials=10, seed=3, loss=0.1)
    assert stats.mean_rounds <= stats.bound, stats


def test_the_papers_fanout_four_at_sixteen_shards_takes_about_two_rounds():
    # §IV-A: N = 16, f = 4, δ = 1 s → "convergence within approximately 2 s".
    stats = measure(16, fanout=4, trials=30, seed=1)
    assert stats.mean_rounds <= 3, stats
