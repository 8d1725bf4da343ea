"""A linearizability checker for versioned compare-and-set registers (Wing & Gong, with
Lowe's memoisation as in Knossos/Porcupine), written here: no maintained PyPI library checks
linearizability.

The model is one document: a state ``(version, value)``, ``(0, None)`` before its first write.

* ``read`` → ``(version, value)``: the state at its linearization point.
* ``cas(expected, new)`` → ``ok`` with ``expected + 1``: the state was at ``expected`` and
  becomes ``(expected + 1, new)``.
* ``cas`` that failed with 409 ``version_conflict``: the state was not at ``expected``.
* ``cas`` with an ``info`` outcome may not have happened at all, or happened at any point after
  its invocation. Its coordinator may also have *burned* it (``cluster/replication/fencing.py``): installed
  the previous document again at ``expected + 2``, after the failed record was visible on an
  owner that took it, or without it ever being visible. So an indeterminate ``cas(expected,
  new, previous)`` is two optional steps: its own, and the burn to ``(expected + 2, previous)``.
  Other failed operations did not happen and are left out.

Registers are independent, so each key is checked on its own (P-compositionality). The search
explores (linearized set, state) pairs at most once; an ``info`` CAS whose expected version the
register has passed can never apply and is dropped (versions only grow), which keeps
indeterminate operations from multiplying the search. A search past ``budget`` states answers
"unknown" (``None``), never a false verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .history import Op, Outcome

State = tuple[int, Any]
INITIAL: State = (0, None)


@dataclass(frozen=True)
class _Step:
    index: int
    f: str  # "read" | "cas" | "cas_fail" | "burn"
    invoke: float
    complete: float  # math.inf for an indeterminate operation
    required: bool
    expected: int = 0
    value: Any = None
    previous: Any = None


@dataclass(frozen=True)
class Verdict:
    key: str
    linearizable: bool | None  # None: the search ran out of budget
    ops: int
    explored: int
    detail: str = ""


def _steps(ops: Iterable[Op]) -> list[_Step]:
    steps: list[_Step] = []
    for op in sorted(ops, key=lambda o: o.invoke):
        i = len(steps)
        if op.f == "read" and op.outcome is Outcome.OK:
            steps.append(_Step(i, "read", op.invoke, op.complete, True, *op.result))
        elif op.f == "cas" and op.outcome is Outcome.OK:
            steps.append(_Step(i, "cas", op.invoke, op.complete, True, *op.arg))
        elif op.f == "cas" and op.outcome is Outcome.FAIL and op.error.endswith("version_conflict"):
            steps.append(_Step(i, "cas_fail", op.invoke, op.complete, True, op.arg[0]))
        elif op.f == "cas" and op.outcome is Outcome.INFO:
            steps.append(_Step(i, "cas", op.invoke, math.inf, False, *op.arg))
            steps.append(_Step(i + 1, "burn", op.invoke, math.inf, False, *op.arg))
    return steps


def _next_states(step: _Step, state: State) -> list[State]:
    """States after ``step`` at this point; empty when it cannot linearize here."""
    version = state[0]
    if step.f == "read":
        return [state] if (step.expected, step.value) == state else []
    if step.f == "cas_fail":
        return [state] if version != step.expected else []
    if step.f == "burn":
        burned = (step.expected + 2, step.previous)
        return [burned] if state in ((step.expected, step.previous), (step.expected + 1, step.value)) else []
    return [(version + 1, step.value)] if version == step.expected else []


def check_register(key: str, ops: Iterable[Op], initial: State = INITIAL, budget: int = 200_000) -> Verdict:
    """Is this key's history linearizable for a versioned CAS register starting at ``initial``?"""
    steps = _steps(ops)
    n = len(steps)
    required = 0
    for s in steps:
        if s.required:
            required |= 1 << s.index
    seen: set[tuple[int, State]] = set()
    stack: list[tuple[int, State]] = [(0, initial)]
    best = 0
    while stack:
        mask, state = stack.pop()
        mask = _drop_dead(steps, mask, state)
        if (mask, state) in seen:
            continue
        seen.add((mask, state))
        if len(seen) > budget:
            return Verdict(key, None, n, len(seen), f"more than {budget} states")
        if mask & required == required:
            return Verdict(key, True, n, len(seen))
        best = max(best, bin(mask & required).count("1"))
        pending = [s for s in steps if not mask >> s.index & 1]
        horizon = min(s.complete for s in pending)
        for s in pending:
            if s.invoke > horizon:
                break  # sorted by invocation: no later one can go next either
            for after in _next_states(s, state):
                stack.append((mask | 1 << s.index, after))
    stuck = [s for s in steps if s.required]
    return Verdict(
        key,
        False,
        n,
        len(seen),
        f"at most {best} of {len(stuck)} definite operations linearize",
    )


def _drop_dead(steps: list[_Step], mask: int, state: State) -> int:
    """Mark indeterminate steps that can no longer apply (their version is passed) as done."""
    version = state[0]
    for s in steps:
        if not s.required and not mask >> s.index & 1 and s.expected + (s.f == "burn") < version:
            mask |= 1 << s.index
    return mask


def check_registers(ops: Iterable[Op], initial: dict[str, State], budget: int = 200_000) -> list[Verdict]:
    """One verdict per register key."""
    by_key: dict[str, list[Op]] = {}
    for op in ops:
        by_key.setdefault(op.key, []).append(op)
    return [
        check_register(key, by_key.get(key, []), initial.get(key, INITIAL), budget)
        for key in sorted(set(by_key) | set(initial))
    ]
