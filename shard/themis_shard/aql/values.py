"""AQL value semantics, pure: truthiness, a total order across types, and sort keys.

Values are JSON values. Types order null < bool < number < string < array < object, so any two
values compare (a SORT over heterogeneous documents never fails) and ``1 == true`` is false.
"""

from __future__ import annotations

import functools
import math
from typing import Any


def type_rank(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, int | float):
        return 2
    if isinstance(value, str):
        return 3
    if isinstance(value, list):
        return 4
    return 5


def compare(a: Any, b: Any) -> int:
    """-1, 0 or 1 under the AQL total order."""
    ra, rb = type_rank(a), type_rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra == 0:
        return 0
    if ra in (1, 2, 3):
        return (a > b) - (a < b)
    if ra == 4:
        for x, y in zip(a, b, strict=False):
            c = compare(x, y)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    keys = sorted(set(a) | set(b))
    for k in keys:
        c = compare(a.get(k), b.get(k))
        if c:
            return c
    return 0


def equal(a: Any, b: Any) -> bool:
    return compare(a, b) == 0


def truthy(value: Any) -> bool:
    if value is None or value is False:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value != 0
    if isinstance(value, str):
        return value != ""
    return True


def number(value: Any) -> float | int | None:
    """The numeric value for arithmetic, or None (arithmetic on non-numbers yields null)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value


MAX_EXACT_INT = 1 << 63


def finite(value: Any) -> Any:
    """Numbers are doubles as far as JSON clients go: inf/nan become null, and integers beyond
    64 bits become floats (or null), so no result can be unserialisable or arbitrarily large."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= MAX_EXACT_INT:
        try:
            return finite(float(value))
        except OverflowError:
            return None
    return value


def canonical(value: Any) -> Any:
    """A hashable key with ``canonical(a) == canonical(b)`` exactly when ``equal(a, b)``:
    DISTINCT and UNIQUE in linear time."""
    rank = type_rank(value)
    if rank == 2:
        return (2, float(value))
    if rank == 4:
        return (4, tuple(canonical(v) for v in value))
    if rank == 5:
        return (5, tuple(sorted((k, canonical(v)) for k, v in value.items())))
    return (rank, value)


def distinct(values: list[Any]) -> list[Any]:
    seen: set = set()
    out = []
    for v in values:
        key = canonical(v)
        if key not in seen:
            seen.add(key)
            out.append(v)
    return out


def sort_key(directions: tuple[bool, ...]):
    """A ``key=`` for rows carrying their sort values as a tuple in ``row[0]``."""

    def cmp(x, y) -> int:
        for asc, a, b in zip(directions, x[0], y[0], strict=True):
            c = compare(a, b)
            if c:
                return c if asc else -c
        return 0

    return functools.cmp_to_key(cmp)
