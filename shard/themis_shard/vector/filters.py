"""Metadata filters for vector search: a small, pure MongoDB-style matcher.

``{"field": value}`` is equality; ``{"field": {"$gt": 3}}`` uses an operator
(``$eq $ne $gt $gte $lt $lte $in $nin $exists``); dotted names reach into nested objects.
Several fields must all match. Invalid filters are rejected up front (400), not at match time.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadRequest

_OPS = {"$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"}
_MISSING = object()


def validate_filter(flt: Any) -> dict[str, Any]:
    if flt is None:
        return {}
    if not isinstance(flt, dict):
        raise BadRequest("filter must be an object of field conditions", code="invalid_filter")
    for field, cond in flt.items():
        if not field or field.startswith("$"):
            raise BadRequest(f"invalid filter field {field!r}", code="invalid_filter")
        if isinstance(cond, dict) and any(k.startswith("$") for k in cond):
            for op, arg in cond.items():
                if op not in _OPS:
                    raise BadRequest(
                        f"unknown filter operator {op!r}; use one of {sorted(_OPS)}", code="invalid_filter"
                    )
                if op in ("$in", "$nin") and not isinstance(arg, list):
                    raise BadRequest(f"{op} takes a list", code="invalid_filter")
    return flt


def _lookup(document: dict[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _compare(op: str, value: Any, arg: Any) -> bool:
    if op == "$exists":
        return (value is not _MISSING) == bool(arg)
    if op == "$eq":
        return value == arg
    if op == "$ne":
        return value != arg
    if op == "$in":
        return value in arg
    if op == "$nin":
        return value not in arg
    if value is _MISSING or value is None or isinstance(value, bool) != isinstance(arg, bool):
        return False
    try:
        return {"$gt": value > arg, "$gte": value >= arg, "$lt": value < arg, "$lte": value <= arg}[op]
    except TypeError:  # incomparable types never match
        return False


def matches(document: dict[str, Any], flt: dict[str, Any]) -> bool:
    for field, cond in flt.items():
        value = _lookup(document, field)
        if isinstance(cond, dict) and any(k.startswith("$") for k in cond):
            if not all(_compare(op, value, arg) for op, arg in cond.items()):
                return False
        elif value is _MISSING or value != cond:
            return False
    return True
