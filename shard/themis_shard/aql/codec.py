"""Expressions as JSON, so a coordinator can ship a scan fragment's FILTER/SORT to a peer."""

from __future__ import annotations

import dataclasses
from typing import Any

from . import ast
from .errors import semantic

_TYPES = {
    cls.__name__: cls
    for cls in (
        ast.Literal,
        ast.Bind,
        ast.Var,
        ast.Attr,
        ast.Index,
        ast.Array,
        ast.Object,
        ast.Unary,
        ast.Binary,
        ast.Ternary,
        ast.Call,
        ast.Score,
    )
}


def encode(value: Any) -> Any:
    if isinstance(value, ast.Expr):
        return {
            "t": type(value).__name__,
            **{f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, tuple):
        return [encode(v) for v in value]
    return value


def decode(value: Any) -> Any:
    """Inverse of :func:`encode`; anything malformed is a 400 (the peer sent garbage)."""
    try:
        if isinstance(value, dict):
            cls = _TYPES[value["t"]]
            return cls(**{k: decode(v) for k, v in value.items() if k != "t"})
        if isinstance(value, list):
            return tuple(decode(v) for v in value)
        return value
    except (KeyError, TypeError) as exc:
        raise semantic(f"malformed expression: {exc}", "invalid_request") from None
