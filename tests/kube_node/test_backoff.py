"""Crash back-off: doubling from the first delay up to the cap, reset after a long healthy run."""

from themis_testing.kube_node.backoff import Backoff


def test_delay_doubles_up_to_the_cap():
    b = Backoff(initial_s=10, max_s=300)
    assert [b.delay(n) for n in range(0, 8)] == [0, 10, 20, 40, 80, 160, 300, 300]


def test_a_long_run_resets_the_back_off():
    b = Backoff(initial_s=1, max_s=10, reset_after_s=600)
    assert b.next_step(3, ran_for_s=5) == 4
    assert b.next_step(3, ran_for_s=601) == 1
