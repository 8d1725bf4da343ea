"""Spec: what a request is charged against tokens_per_min, read from its body before the route:
max_completion_tokens or max_tokens (the engine's default when absent) × n, summed over a batch;
the priority asked is the body's, or the highest of a batch's items."""

from __future__ import annotations

from themis_shard.tenants.charge import charge

DEFAULT = 256


def test_max_tokens_times_n_and_the_default_when_absent() -> None:
    assert charge({"prompt": "x", "max_tokens": 40}, default_max_tokens=DEFAULT) == (40, 0)
    assert charge({"messages": [], "max_tokens": 10, "n": 3}, default_max_tokens=DEFAULT) == (30, 0)
    assert charge(
        {"messages": [], "max_completion_tokens": 7, "max_tokens": 99}, default_max_tokens=DEFAULT
    ) == (
        7,
        0,
    )
    assert charge({"prompt": "x", "priority": 5}, default_max_tokens=DEFAULT) == (DEFAULT, 5)


def test_a_batch_is_charged_the_sum_and_asks_its_highest_priority() -> None:
    body = {"requests": [{"prompt": "a", "max_tokens": 4}, {"prompt": "b", "priority": 9}]}
    assert charge(body, default_max_tokens=DEFAULT) == (4 + DEFAULT, 9)


def test_a_malformed_field_counts_as_absent_for_the_route_to_refuse_by_name() -> None:
    assert charge({"max_tokens": "many", "n": True, "priority": "high"}, default_max_tokens=DEFAULT) == (
        DEFAULT,
        0,
    )
    assert charge(None, default_max_tokens=DEFAULT) == (DEFAULT, 0)
