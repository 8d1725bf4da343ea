"""Pure checkers over a history and the healed cluster's state; each returns its anomalies
(strings that say what broke, empty when the property holds)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .history import Op, Outcome
from .linearizable import State, check_registers


def register_anomalies(ops: Iterable[Op], initial: Mapping[str, State]) -> tuple[list[str], int]:
    """Non-linearizable register keys, and how many keys the search could not decide."""
    verdicts = check_registers([o for o in ops if o.workload == "register"], dict(initial))
    bad = [
        f"register {v.key}: not linearizable ({v.detail}; {v.ops} ops)"
        for v in verdicts
        if v.linearizable is False
    ]
    return bad, sum(v.linearizable is None for v in verdicts)


def bank_anomalies(ops: Iterable[Op], totals: Mapping[str, int]) -> list[str]:
    """Every validated read of a group of accounts (``read`` ok: balances of versions that a
    conditional no-op transaction proved coexisted) and every ``final`` read sums to the
    group's total, with no balance below zero."""
    found = []
    for op in ops:
        if op.workload != "bank" or op.f not in ("read", "final") or op.outcome is not Outcome.OK:
            continue
        balances: Mapping[str, int] = op.result
        total = sum(balances.values())
        if total != totals[op.key]:
            found.append(
                f"bank {op.key}: {op.f} at {op.invoke:.2f} sums to {total}, "
                f"not {totals[op.key]}: {dict(balances)}"
            )
        negative = {a: b for a, b in balances.items() if b < 0}
        if negative:
            found.append(f"bank {op.key}: {op.f} at {op.invoke:.2f} has negative balances {negative}")
    return found


def set_anomalies(ops: Iterable[Op], final: Mapping[str, list[Any]]) -> list[str]:
    """Every acknowledged element is in its set's final read; none whose add definitely
    failed is; no element appears twice."""
    found = []
    for key, elements in final.items():
        dupes = sorted({e for e in elements if elements.count(e) > 1})
        if dupes:
            found.append(f"set {key}: elements present twice: {dupes}")
    for op in ops:
        if op.workload != "set" or op.f != "add":
            continue
        present = op.arg in final.get(op.key, [])
        if op.outcome is Outcome.OK and not present:
            found.append(f"set {op.key}: acknowledged element {op.arg} lost")
        if op.outcome is Outcome.FAIL and present:
            found.append(f"set {op.key}: element {op.arg} present although its add failed ({op.error})")
    return found


def replica_anomalies(copies: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[str]:
    """Keys whose owners hold different records (version, stamp and bytes compared)."""
    return [
        f"replicas of {c}/{k} differ: {dict(by_owner)}"
        for (c, k), by_owner in sorted(copies.items())
        if len({repr(v) for v in by_owner.values()}) > 1
    ]
