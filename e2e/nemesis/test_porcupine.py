"""Spec of the independent check: hand-made register histories exported for Porcupine and checked
by ``tools/porcupine`` (built here from its vendored source with Debian's Go) get the verdicts
linearizability gives them — real violations fail, indeterminate operations that may have
applied late, never, or been burned pass — and our own checker agrees on every one."""

from __future__ import annotations

from pathlib import Path

import pytest

from .history import Op, Outcome
from .linearizable import check_register
from .porcupine import anomalies, check, export

pytestmark = pytest.mark.e2e  # builds and runs the Go program (make test-tools installs Go)

OK, FAIL, INFO = Outcome.OK, Outcome.FAIL, Outcome.INFO
START = {"k": (1, "init")}


def read(t0: float, t1: float, version: int, value: str, p: int = 0) -> Op:
    return Op(p, "register", "read", "k", None, t0, t1, OK, (version, value))


def cas(
    t0: float, t1: float, expected: int, value: str, outcome=OK, p: int = 1, previous: str = "init"
) -> Op:
    error = (
        "409 version_conflict"
        if outcome is FAIL
        else ("503 write_outcome_unknown" if outcome is INFO else "")
    )
    return Op(p, "register", "cas", "k", (expected, value, previous), t0, t1, outcome, expected + 1, error)


def write(t0: float, t1: float, value: str, version: int | None, outcome=OK, p: int = 2) -> Op:
    return Op(p, "register", "write", "k", value, t0, t1, outcome, version)


def verdicts(tmp_path: Path, *ops: Op, ours: bool = True) -> bool | None:
    """Porcupine's verdict, after checking that ours (CAS and reads only) is the same."""
    verdict = check(export(ops, START, tmp_path / "history.jsonl")).linearizable
    if ours:
        assert check_register("k", ops, START["k"]).linearizable is verdict
    return verdict


def test_sequential_reads_and_cas_are_linearizable(tmp_path: Path) -> None:
    assert verdicts(tmp_path, read(0, 1, 1, "init"), cas(2, 3, 1, "a"), read(4, 5, 2, "a"), cas(6, 7, 2, "b"))


def test_a_stale_read_after_an_acknowledged_cas_is_a_violation(tmp_path: Path) -> None:
    assert verdicts(tmp_path, cas(0, 1, 1, "a"), read(2, 3, 2, "a"), read(4, 5, 1, "init")) is False


def test_concurrent_operations_may_take_effect_in_either_order(tmp_path: Path) -> None:
    assert verdicts(tmp_path, cas(0, 10, 1, "a"), read(1, 2, 1, "init"), read(3, 4, 2, "a"))
    assert verdicts(tmp_path, cas(0, 10, 1, "a"), cas(0, 10, 1, "b", FAIL, p=3), read(11, 12, 2, "a"))


def test_two_acknowledged_cas_on_one_version_are_a_violation(tmp_path: Path) -> None:
    assert verdicts(tmp_path, cas(0, 1, 1, "a"), cas(0, 1, 1, "b", p=3), read(2, 3, 2, "b")) is False


def test_versions_going_backwards_after_an_indeterminate_cas_is_a_violation(tmp_path: Path) -> None:
    """The outside finding: a CAS became indeterminate, its value was read at v2, then v1 came
    back and a later write was acknowledged as v2 with another value."""
    history = (
        cas(0, 100, 1, "lost", INFO),
        read(1, 2, 2, "lost"),
        read(3, 4, 1, "init"),
        cas(5, 6, 1, "other", p=3),
        read(7, 8, 2, "other"),
    )
    assert verdicts(tmp_path, *history) is False
    found = anomalies(history, START, tmp_path / "run.jsonl")
    assert len(found) == 1 and found[0].startswith("porcupine: k: 6 operations: Illegal")  # 5 + the burn


def test_an_indeterminate_cas_may_apply_late_never_or_be_burned(tmp_path: Path) -> None:
    assert verdicts(tmp_path, cas(0, 1, 1, "x", INFO), read(5, 6, 1, "init"))  # never
    assert verdicts(tmp_path, cas(0, 1, 1, "x", INFO), read(5, 6, 1, "init"), read(7, 8, 2, "x"))  # late
    burned = (cas(0, 1, 1, "x", INFO), read(2, 3, 2, "x"), read(4, 5, 3, "init"), cas(6, 7, 3, "y"))
    assert verdicts(tmp_path, *burned)  # seen, then the previous document again one version up
    assert verdicts(tmp_path, cas(0, 1, 1, "x", INFO), read(4, 5, 3, "init"))  # burned unseen
    assert verdicts(tmp_path, cas(0, 1, 1, "x", INFO), read(4, 5, 3, "x")) is False  # a burn restores "init"


def test_blind_writes_take_the_next_version(tmp_path: Path) -> None:
    assert verdicts(tmp_path, write(0, 1, "a", 2), read(2, 3, 2, "a"), write(4, 5, "b", 3), ours=False)
    assert verdicts(tmp_path, write(0, 1, "a", 2), read(2, 3, 1, "init"), ours=False) is False
    assert verdicts(
        tmp_path, write(0, 1, "a", None, INFO), read(2, 3, 1, "init"), read(4, 5, 2, "a"), ours=False
    )
    assert verdicts(tmp_path, write(0, 1, "a", 3), ours=False) is False  # acknowledged at a skipped version
