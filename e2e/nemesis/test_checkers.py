"""Spec of the nemesis checkers on small synthetic histories (no cluster, no subprocess)."""

from __future__ import annotations

import itertools
import random

import httpx
from themis_client.errors import ThemisConnectionError, ThemisError

from .checkers import bank_anomalies, replica_anomalies, set_anomalies
from .faults import partition_pairs, schedule
from .history import Op, Outcome, classify
from .linearizable import check_register

OK, FAIL, INFO = Outcome.OK, Outcome.FAIL, Outcome.INFO
START = (1, "init")


def read(t0: float, t1: float, version: int, value: str, p: int = 0) -> Op:
    return Op(p, "register", "read", "k", None, t0, t1, OK, (version, value))


def cas(
    t0: float, t1: float, expected: int, value: str, outcome=OK, p: int = 1, error: str = "", previous="init"
) -> Op:
    result = expected + 1 if outcome is OK else None
    return Op(p, "register", "cas", "k", (expected, value, previous), t0, t1, outcome, result, error)


def linearizable(*ops: Op) -> bool | None:
    return check_register("k", ops, START).linearizable


# -- registers ------------------------------------------------------------------------------------


def test_sequential_writes_and_reads_are_linearizable() -> None:
    assert linearizable(read(0, 1, 1, "init"), cas(2, 3, 1, "a"), read(4, 5, 2, "a"), cas(6, 7, 2, "b"))


def test_a_read_of_an_overwritten_value_after_the_write_completed_is_not() -> None:
    assert linearizable(cas(0, 1, 1, "a"), read(2, 3, 1, "init")) is False


def test_a_concurrent_read_may_see_either_side_of_a_write() -> None:
    assert linearizable(cas(0, 10, 1, "a"), read(1, 2, 1, "init"), read(3, 4, 2, "a"))
    # ...but not new, then old again
    assert linearizable(cas(0, 10, 1, "a"), read(1, 2, 2, "a"), read(3, 4, 1, "init")) is False


def test_two_acknowledged_writes_of_one_version_are_a_split_brain() -> None:
    assert linearizable(cas(0, 5, 1, "a", p=1), cas(0, 5, 1, "b", p=2)) is False


def test_an_acknowledged_write_that_no_later_read_sees_is_lost() -> None:
    assert linearizable(cas(0, 1, 1, "a"), read(2, 3, 2, "b")) is False


def test_a_version_conflict_needs_another_version_at_some_point() -> None:
    assert linearizable(cas(0, 1, 1, "a"), cas(2, 3, 1, "b", FAIL, error="409 version_conflict"))
    assert linearizable(cas(0, 1, 1, "b", FAIL, error="409 version_conflict"), read(2, 3, 1, "init")) is False


def test_other_definite_failures_did_not_happen() -> None:
    assert linearizable(cas(0, 1, 1, "a", FAIL, error="unreachable"), read(2, 3, 1, "init"))
    assert linearizable(cas(0, 1, 1, "a", FAIL, error="unreachable"), read(2, 3, 2, "a")) is False


def test_an_indeterminate_write_may_have_happened_late_or_never() -> None:
    assert linearizable(cas(0, 1, 1, "a", INFO), read(2, 3, 1, "init"), read(4, 5, 2, "a"))
    assert linearizable(cas(0, 1, 1, "a", INFO), read(2, 3, 1, "init"))
    # but not before it was invoked
    assert linearizable(read(0, 1, 2, "a"), cas(2, 3, 1, "a", INFO)) is False


def test_an_indeterminate_write_may_have_been_burned_one_version_above_it() -> None:
    # burned without ever being visible, or after a reader saw it on an owner that took it
    assert linearizable(cas(0, 1, 1, "a", INFO), read(2, 3, 3, "init"), cas(4, 5, 3, "b", previous="init"))
    assert linearizable(cas(0, 1, 1, "a", INFO), read(2, 3, 2, "a"), read(4, 5, 3, "init"))
    # the burn never reuses the failed record's version, and an acknowledged write is never burned
    assert linearizable(cas(0, 1, 1, "a", INFO), read(2, 3, 2, "init")) is False
    assert linearizable(cas(0, 1, 1, "a"), read(2, 3, 3, "init")) is False


def test_many_indeterminate_writes_stay_cheap() -> None:
    ops = [cas(i, i + 0.5, 1, f"x{i}", INFO, p=i) for i in range(40)]
    ops += [cas(100 + 2 * v, 101 + 2 * v, v, f"v{v}") for v in range(1, 200)]
    verdict = check_register("k", ops, START)
    assert verdict.linearizable is True and verdict.explored < 5_000


def test_a_search_over_budget_is_undecided_not_a_verdict() -> None:
    ops = [read(0, 100, 1, "init", p=i) for i in range(30)] + [cas(0, 100, 1, "a")]
    ops += [read(0, 100, 2, "a", p=100 + i) for i in range(30)]
    assert check_register("k", ops, START, budget=50).linearizable is None


# -- bank -----------------------------------------------------------------------------------------


def bank(f: str, balances: dict[str, int], outcome=OK) -> Op:
    return Op(0, "bank", f, "g", None, 0, 1, outcome, balances)


def test_consistent_reads_sum_to_the_total() -> None:
    assert (
        bank_anomalies([bank("read", {"a": 70, "b": 130}), bank("final", {"a": 100, "b": 100})], {"g": 200})
        == []
    )


def test_a_read_or_final_state_off_the_total_is_an_anomaly() -> None:
    found = bank_anomalies(
        [bank("read", {"a": 70, "b": 100}), bank("final", {"a": 100, "b": 110})], {"g": 200}
    )
    assert len(found) == 2 and "sums to 170" in found[0] and "final" in found[1]


def test_a_negative_balance_is_an_anomaly_and_unvalidated_reads_are_ignored() -> None:
    assert bank_anomalies([bank("read", {"a": -10, "b": 210})], {"g": 200})
    assert bank_anomalies([bank("read", {"a": 0, "b": 0}, FAIL)], {"g": 200}) == []


# -- sets -----------------------------------------------------------------------------------------


def add(element: str, outcome: Outcome, error: str = "") -> Op:
    return Op(0, "set", "add", "s", element, 0, 1, outcome, None, error)


def test_every_acknowledged_element_is_in_the_final_read() -> None:
    ops = [add("x", OK), add("y", INFO), add("z", FAIL, "409 version_conflict")]
    assert set_anomalies(ops, {"s": ["x"]}) == []
    assert set_anomalies(ops, {"s": ["x", "y"]}) == []
    assert set_anomalies(ops, {"s": ["y"]}) == ["set s: acknowledged element x lost"]


def test_a_failed_or_duplicated_element_is_an_anomaly() -> None:
    assert set_anomalies([add("z", FAIL, "409 version_conflict")], {"s": ["z"]})
    assert set_anomalies([], {"s": ["x", "x"]}) == ["set s: elements present twice: ['x']"]


# -- replicas -------------------------------------------------------------------------------------


def test_replicas_agree_only_on_identical_records() -> None:
    same = (3, 17, "shard-0", {"v": 1})
    assert replica_anomalies({("c", "k"): {"shard-0": same, "shard-1": same}}) == []
    assert replica_anomalies({("c", "k"): {"shard-0": same, "shard-1": (3, 18, "shard-1", {"v": 1})}})
    assert replica_anomalies({("c", "k"): {"shard-0": same, "shard-1": None}})


# -- the nemesis schedule -------------------------------------------------------------------------


def test_a_seed_fixes_the_schedule_and_every_fault_ends_within_the_run() -> None:
    shards = ["shard-0", "shard-1", "shard-2"]
    a = schedule(random.Random(7), 60, shards)
    assert a == schedule(random.Random(7), 60, shards)
    assert a != schedule(random.Random(8), 60, shards)
    assert len(a) >= 6 and all(f.at + f.duration <= 60 for f in a)
    assert all(b.at >= f.at + f.duration for f, b in itertools.pairwise(a))
    assert {f.kind for f in a} == {"kill", "pause", "partition", "crash"}


def test_a_shard_crashes_for_good_at_most_once_and_no_later_fault_targets_it() -> None:
    shards = ["shard-0", "shard-1", "shard-2"]
    for seed in range(20):
        faults = schedule(random.Random(seed), 120, shards)
        crashes = [i for i, f in enumerate(faults) if f.kind == "crash"]
        assert len(crashes) <= 1
        if crashes:
            dead = faults[crashes[0]].target
            assert all(f.target != dead for f in faults[crashes[0] + 1 :])


def test_partition_shapes_cut_the_named_links() -> None:
    shards = ["a", "b", "c"]
    assert partition_pairs("one_way", "a", "b", shards) == (("a", "b"),)
    assert partition_pairs("split_pair", "a", "b", shards) == (("a", "b"), ("b", "a"))
    assert set(partition_pairs("isolate", "a", "b", shards)) == {
        ("a", "b"),
        ("a", "c"),
        ("b", "a"),
        ("c", "a"),
    }


# -- outcomes -------------------------------------------------------------------------------------


def test_a_connection_lost_after_sending_is_indeterminate_and_one_never_made_is_a_failure() -> None:
    """The client says which: ``unreachable`` never reached a shard, ``connection_lost`` broke
    after the request was sent (the shard may have applied it). Both were once counted as
    definite failures, and a set element whose add had applied was reported as an anomaly."""
    assert classify(ThemisConnectionError(0, "unreachable", "no connection")) == (FAIL, "unreachable")
    lost = ThemisConnectionError(0, "connection_lost", "read timed out")
    assert classify(lost) == (INFO, "connection_lost")
    assert classify(httpx.ReadTimeout("read timed out")) == (INFO, "ReadTimeout")
    assert classify(ThemisError(503, "coordinator_unavailable", "aborted"))[0] is FAIL
    assert classify(ThemisError(503, "write_outcome_unknown", "maybe"))[0] is INFO
