"""Expression evaluation, pure: an expression, the row's variables and the bind parameters in,
a JSON value out. No I/O — LLM and storage work happens in the executor around it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from . import ast
from .errors import type_error
from .values import compare, distinct, equal, finite, number, truthy

MAX_RANGE = 1_000_000


def score_slot(var: str) -> str:
    """Where a row keeps the index score of ``var`` (not a valid AQL identifier)."""
    return f"$score:{var}"


def evaluate(expr: ast.Expr, env: Mapping[str, Any], binds: Mapping[str, Any]) -> Any:
    match expr:
        case ast.Literal(value):
            return value
        case ast.Bind(name):
            return binds[name]
        case ast.Var(name):
            return env.get(name)
        case ast.Score(var):
            return env.get(score_slot(var))
        case ast.Attr(obj, name):
            value = evaluate(obj, env, binds)
            return value.get(name) if isinstance(value, dict) else None
        case ast.Index(obj, key):
            return _index(evaluate(obj, env, binds), evaluate(key, env, binds))
        case ast.Array(items):
            return [evaluate(i, env, binds) for i in items]
        case ast.Object(pairs):
            return {k: evaluate(v, env, binds) for k, v in pairs}
        case ast.Unary("not", operand):
            return not truthy(evaluate(operand, env, binds))
        case ast.Unary("-", operand):
            value = number(evaluate(operand, env, binds))
            return None if value is None else -value
        case ast.Binary("and", left, right):
            value = evaluate(left, env, binds)
            return evaluate(right, env, binds) if truthy(value) else value
        case ast.Binary("or", left, right):
            value = evaluate(left, env, binds)
            return value if truthy(value) else evaluate(right, env, binds)
        case ast.Binary(op, left, right):
            return binary(op, evaluate(left, env, binds), evaluate(right, env, binds))
        case ast.Ternary(cond, then, otherwise):
            return evaluate(then if truthy(evaluate(cond, env, binds)) else otherwise, env, binds)
        case ast.Call(name, args):
            return call(name, [evaluate(a, env, binds) for a in args])
    raise type_error(f"cannot evaluate {type(expr).__name__}")  # pragma: no cover - exhaustive


def _index(value: Any, key: Any) -> Any:
    if isinstance(value, dict) and isinstance(key, str):
        return value.get(key)
    is_int = isinstance(key, int) and not isinstance(key, bool)
    if isinstance(value, list) and is_int and -len(value) <= key < len(value):
        return value[key]
    return None


def _like(value: Any, pattern: Any) -> bool:
    if not isinstance(value, str) or not isinstance(pattern, str):
        return False
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def binary(op: str, a: Any, b: Any) -> Any:
    if op == "==":
        return equal(a, b)
    if op == "!=":
        return not equal(a, b)
    if op in ("<", "<=", ">", ">="):
        c = compare(a, b)
        return {"<": c < 0, "<=": c <= 0, ">": c > 0, ">=": c >= 0}[op]
    if op == "in":
        return isinstance(b, list) and any(equal(a, x) for x in b)
    if op == "not in":
        return not (isinstance(b, list) and any(equal(a, x) for x in b))
    if op == "like":
        return _like(a, b)
    if op == "..":
        lo, hi = number(a), number(b)
        if not isinstance(lo, int) or not isinstance(hi, int):
            raise type_error("a range needs integer bounds")
        if hi - lo >= MAX_RANGE:
            raise type_error(f"a range may hold at most {MAX_RANGE} values")
        return list(range(lo, hi + 1))
    if op == "+" and isinstance(a, str) and isinstance(b, str):
        return a + b
    x, y = number(a), number(b)
    if x is None or y is None:
        return None
    try:
        return _arith(op, x, y)
    except (OverflowError, ValueError):
        return None


def _arith(op: str, x: int | float, y: int | float) -> int | float | None:
    if op == "+":
        return finite(x + y)
    if op == "-":
        return finite(x - y)
    if op == "*":
        return finite(x * y)
    if y == 0:
        return None
    if op == "/":
        return finite(x / y)
    return (
        finite(math.fmod(x, y))
        if isinstance(x, float) or isinstance(y, float)
        else x % y
        if x >= 0
        else -(-x % y)
    )


# -- functions ---------------------------------------------------------------------------------
def _length(v):
    if isinstance(v, str | list | dict):
        return len(v)
    return 0 if v is None else 1


def _num_list(v):
    return [x for x in v if number(x) is not None] if isinstance(v, list) else []


def _similarity(a, b):
    """Cosine similarity of two equal-length number lists; null otherwise."""
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b) or not a:
        return None
    if any(number(x) is None for x in a) or any(number(x) is None for x in b):
        return None
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return None if na == 0 or nb == 0 else finite(dot / (na * nb))


def _round(v, digits=0):
    v = number(v)
    d = number(digits)
    if v is None or not isinstance(d, int) or abs(d) > 15:
        return None
    return round(v, d) if d else math.floor(v + 0.5)


def _merge(*objects):
    out: dict = {}
    for o in objects:
        if not isinstance(o, dict):
            return None
        out.update(o)
    return out


def _to_string(v):
    import json

    return v if isinstance(v, str) else "" if v is None else json.dumps(v, separators=(",", ":"))


def _to_number(v):
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int | float):
        return v
    if isinstance(v, str):
        try:
            return finite(float(v)) if any(c in v for c in ".eE") else int(v)
        except ValueError:
            return None
    return None


def _substring(s, start, length=None):
    if not isinstance(s, str) or number(start) is None or not isinstance(start, int):
        return None
    if length is None:
        return s[start:]
    return s[start : start + length] if isinstance(length, int) and not isinstance(length, bool) else None


def _unique(v):
    return distinct(v) if isinstance(v, list) else []


#: name → (function, min args, max args)
FUNCTIONS: dict[str, tuple[Callable[..., Any], int, int]] = {
    "LENGTH": (_length, 1, 1),
    "LOWER": (lambda s: s.lower() if isinstance(s, str) else None, 1, 1),
    "UPPER": (lambda s: s.upper() if isinstance(s, str) else None, 1, 1),
    "CONCAT": (lambda *xs: "".join(_to_string(x) for x in xs), 1, 64),
    "CONTAINS": (lambda s, sub: isinstance(s, str) and isinstance(sub, str) and sub in s, 2, 2),
    "SUBSTRING": (_substring, 2, 3),
    "TO_STRING": (_to_string, 1, 1),
    "TO_NUMBER": (_to_number, 1, 1),
    "ABS": (lambda v: None if number(v) is None else abs(v), 1, 1),
    "FLOOR": (lambda v: None if number(v) is None else math.floor(v), 1, 1),
    "CEIL": (lambda v: None if number(v) is None else math.ceil(v), 1, 1),
    "ROUND": (_round, 1, 2),
    "SQRT": (lambda v: None if number(v) is None or v < 0 else math.sqrt(v), 1, 1),
    "MIN": (lambda v: min(_num_list(v), default=None), 1, 1),
    "MAX": (lambda v: max(_num_list(v), default=None), 1, 1),
    "SUM": (lambda v: finite(sum(_num_list(v))), 1, 1),
    "AVG": (lambda v: finite(sum(_num_list(v)) / len(_num_list(v))) if _num_list(v) else None, 1, 1),
    "FIRST": (lambda v: v[0] if isinstance(v, list) and v else None, 1, 1),
    "LAST": (lambda v: v[-1] if isinstance(v, list) and v else None, 1, 1),
    "UNIQUE": (_unique, 1, 1),
    "KEYS": (lambda o: sorted(o) if isinstance(o, dict) else None, 1, 1),
    "HAS": (lambda o, k: isinstance(o, dict) and k in o, 2, 2),
    "MERGE": (_merge, 1, 64),
    "IS_NULL": (lambda v: v is None, 1, 1),
    "IS_NUMBER": (lambda v: number(v) is not None, 1, 1),
    "IS_STRING": (lambda v: isinstance(v, str), 1, 1),
    "SIMILARITY": (_similarity, 2, 2),
}


def call(name: str, args: list[Any]) -> Any:
    fn, _, _ = FUNCTIONS[name]  # arity and existence are checked by the planner
    try:
        return finite(fn(*args))
    except (TypeError, ValueError, OverflowError):
        return None
