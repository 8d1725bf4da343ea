"""The HPA controller's arithmetic, rule by rule, as kube-controller-manager applies it."""

from __future__ import annotations

from themis_testing.autoscaler import algorithm as hpa
from themis_testing.autoscaler.controller import parse_quantity

PODS = ["demo-0", "demo-1"]


def test_a_pods_metric_asks_for_enough_replicas_to_bring_the_average_to_the_target():
    assert hpa.replicas_for_metric(2, {"demo-0": 6, "demo-1": 4}, PODS, target=2) == 5
    assert hpa.replicas_for_metric(4, {p: 0.5 for p in ["a", "b", "c", "d"]}, ["a", "b", "c", "d"], 2) == 1


def test_within_ten_percent_of_the_target_nothing_changes():
    assert hpa.replicas_for_metric(2, {"demo-0": 2.1, "demo-1": 2.0}, PODS, target=2) == 2


def test_a_pod_without_the_metric_counts_as_idle_when_scaling_out_and_as_on_target_when_scaling_in():
    pods = ["a", "b", "c"]
    # Out: a and b at 4 against 2 (ratio 2); c missing counts as 0 -> (4+4+0)/3/2 = 1.33 -> 4.
    assert hpa.replicas_for_metric(3, {"a": 4, "b": 4}, pods, target=2) == 4
    # In: a and b idle; c missing counts as the target -> (0+0+2)/3/2 = 0.33 -> 1.
    assert hpa.replicas_for_metric(3, {"a": 0, "b": 0}, pods, target=2) == 1


def test_a_metric_no_pod_reports_is_missing():
    import pytest

    with pytest.raises(ValueError, match="no pod reports"):
        hpa.replicas_for_metric(2, {}, PODS, target=2)


def test_the_largest_recommendation_wins_and_a_missing_metric_never_lets_it_scale_in():
    assert hpa.combine(3, [2, 5, 3]) == 5
    assert hpa.combine(3, [None, 5]) == 5
    assert hpa.combine(3, [None, 2]) is None
    assert hpa.combine(3, [None, None]) is None


def test_scale_down_waits_for_the_highest_recommendation_of_its_window():
    behavior = hpa.Behavior(up=hpa.Rules(0), down=hpa.Rules(60))
    history = hpa.History()
    assert hpa.stabilize(history, 0, 3, 5, behavior) == 5  # out at once
    assert hpa.stabilize(history, 30, 5, 2, behavior) == 5  # 5 was asked for 30 s ago
    assert hpa.stabilize(history, 61, 5, 2, behavior) == 2  # the window has passed


def test_scale_up_waits_for_the_lowest_recommendation_of_its_window():
    behavior = hpa.Behavior(up=hpa.Rules(60), down=hpa.Rules(0))
    history = hpa.History()
    assert hpa.stabilize(history, 0, 3, 3, behavior) == 3
    assert hpa.stabilize(history, 30, 3, 6, behavior) == 3
    assert hpa.stabilize(history, 61, 3, 6, behavior) == 6


def test_policies_limit_how_many_replicas_change_per_period():
    down = hpa.Rules(0, (hpa.Policy("Pods", 1, 300),))
    up = hpa.Rules(0, (hpa.Policy("Pods", 2, 120),))
    behavior = hpa.Behavior(up=up, down=down)
    history = hpa.History()
    assert hpa.desired_replicas(history, 0, 3, 8, 2, 10, behavior) == 5  # +2 per 120 s
    hpa.record(history, 0, 2)
    assert hpa.desired_replicas(history, 60, 5, 8, 2, 10, behavior) == 5  # the period's 2 are spent
    assert hpa.desired_replicas(history, 121, 5, 8, 2, 10, behavior) == 7
    hpa.record(history, 121, 2)
    # A period's start counts the changes within it both ways: 7 at 200 s started the period at 3.
    assert hpa.desired_replicas(history, 200, 7, 2, 2, 10, behavior) == 2
    assert hpa.desired_replicas(history, 500, 7, 2, 2, 10, behavior) == 6  # -1 per 300 s
    hpa.record(history, 500, -1)
    assert hpa.desired_replicas(history, 600, 6, 2, 2, 10, behavior) == 6
    assert hpa.desired_replicas(history, 801, 6, 2, 2, 10, behavior) == 5


def test_min_and_max_replicas_bound_every_decision():
    free = hpa.Behavior(
        up=hpa.Rules(0, (hpa.Policy("Pods", 100, 1),)), down=hpa.Rules(0, (hpa.Policy("Pods", 100, 1),))
    )
    assert hpa.desired_replicas(hpa.History(), 0, 3, 50, 2, 6, free) == 6
    assert hpa.desired_replicas(hpa.History(), 0, 3, 0, 2, 6, free) == 2


def test_behavior_is_read_from_the_hpa_spec_with_kubernetes_defaults_for_what_it_omits():
    behavior = hpa.behavior_from_spec(
        {
            "scaleDown": {
                "stabilizationWindowSeconds": 10,
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}],
            }
        }
    )
    assert behavior.down == hpa.Rules(10, (hpa.Policy("Pods", 1, 30),))
    assert behavior.up == hpa.DEFAULT_UP
    assert hpa.behavior_from_spec(None) == hpa.Behavior()


def test_quantities_parse_as_kubernetes_writes_them():
    assert [parse_quantity(q) for q in ("16", "0.8", "800m", "2k", "1Ki", 3)] == [16, 0.8, 0.8, 2000, 1024, 3]
