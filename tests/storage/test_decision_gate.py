"""Spec: the decision gate holds COMMIT decisions while a backup takes its cut — closing waits for
decisions being logged, a held decision goes on once the gate opens (or its lease runs out),
aborts are not held, and only one backup holds the gate at a time."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from themis_shard.storage.decision_gate import DecisionGate, DecisionsInFlight, GateHeld
from themis_shard.storage.documents import DocumentStore
from themis_shard.storage.intents import Decision, TxnLog


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_commit_waits_while_the_gate_is_closed_and_goes_on_when_it_opens(tmp_path: Path) -> None:
    store = DocumentStore(tmp_path / "db")
    log = TxnLog(store)
    log.gate.close("b1", lease_s=60)
    assert log.settle("t2", Decision.ABORT).decision is Decision.ABORT  # aborts pass
    decided = threading.Event()

    def commit() -> None:
        log.settle("t1", Decision.COMMIT)
        decided.set()

    worker = threading.Thread(target=commit)
    worker.start()
    assert not decided.wait(0.3) and log.get("t1") is None  # held: nothing logged during the cut
    assert log.gate.open("b1")
    worker.join(10)
    assert decided.is_set() and log.get("t1").decision is Decision.COMMIT
    store.close()


def test_closing_waits_for_a_decision_being_logged() -> None:
    gate = DecisionGate()
    inside, release = threading.Event(), threading.Event()

    def decide() -> None:
        with gate.passage():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=decide)
    worker.start()
    inside.wait(10)
    with pytest.raises(DecisionsInFlight):
        gate.close("b1", lease_s=60, drain_s=0.2)
    assert gate.holder is None  # left open
    closer = threading.Thread(target=gate.close, args=("b1", 60, 10))
    closer.start()
    release.set()
    closer.join(10)
    worker.join(10)
    assert gate.holder == "b1"


def test_one_backup_at_a_time_a_dead_backups_lease_runs_out_and_a_lapse_shows() -> None:
    clock = FakeClock()
    gate = DecisionGate(clock)
    first = gate.close("b1", lease_s=30)
    assert gate.close("b1", lease_s=30) == first  # the same backup again: renews, no gap
    with pytest.raises(GateHeld, match="b1"):
        gate.close("b2", lease_s=30)
    assert not gate.open("b2") and gate.holder == "b1"
    clock.now = 31
    assert gate.holder is None
    assert gate.close("b1", lease_s=30) != first  # a lapse shows: the cut would not hold
    assert gate.open("b1")
    with gate.passage():
        pass
    gate.close("b2", lease_s=30)
    assert gate.holder == "b2"
