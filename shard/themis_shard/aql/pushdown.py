"""Pushdown rules, pure: which FILTER/SORT/LIMIT work moves into an access path.

* ``v._key == c`` / ``v._key IN c`` → a point (multi-key) lookup;
* ``SORT SIMILARITY(v.embedding, c) DESC LIMIT k`` → the vector index, with the FILTER conjuncts
  that its metadata filter expresses exactly enough (``== != IN NOT IN``, and ``> >=`` on numbers;
  not ``< <=``, which AQL makes true for a missing attribute) pushed into it;
* an inner loop ``FILTER inner.x == <outer expr>`` → a hash join;
* projection: a scan ships only the top-level attributes the rest of the query reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from . import ast
from .evaluate import evaluate
from .exprs import attributes_used, conjuncts, expressions, free_vars, path_of
from .nodes import EMBEDDING, SYSTEM_ATTRIBUTES, JoinNode, ScanNode


def project(nodes: list, terminal: ast.Terminal) -> list:
    """Give each scan the attributes the nodes after it (and the terminal) read."""
    out = list(nodes)
    for i, node in enumerate(nodes):
        scan = node.scan if isinstance(node, JoinNode) else node
        if not isinstance(scan, ScanNode):
            continue
        later = (node.inner_key,) if isinstance(node, JoinNode) else ()
        fields: set[str] | None = set()
        for expr in expressions((later, tuple(nodes[i + 1 :]), terminal)):
            used = attributes_used(expr, scan.var)
            if used is None:
                fields = None
                break
            fields |= used
        if fields is not None:
            scan = dataclasses.replace(scan, fields=tuple(sorted(fields)))
            out[i] = dataclasses.replace(node, scan=scan) if isinstance(node, JoinNode) else scan
    return out


def equi_join(flt: ast.Expr, var: str) -> tuple[ast.Expr, ast.Expr, ast.Expr | None] | None:
    """(inner key, outer key, remaining filter) when ``flt`` has a conjunct ``inner == outer``."""
    parts = conjuncts(flt)
    for n, part in enumerate(parts):
        if not isinstance(part, ast.Binary) or part.op != "==":
            continue
        for inner, outer in ((part.left, part.right), (part.right, part.left)):
            inner_vars, outer_vars = free_vars(inner), free_vars(outer)
            if inner_vars == {var} and outer_vars and var not in outer_vars:
                rest = parts[:n] + parts[n + 1 :]
                remaining = None
                for r in rest:
                    remaining = r if remaining is None else ast.Binary("and", remaining, r)
                return inner, outer, remaining
    return None


_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_MONGO = {"==": "$eq", "!=": "$ne", ">": "$gt", ">=": "$gte", "in": "$in", "not in": "$nin"}


def _scalar(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, int | float) and not isinstance(v, bool))


def _vector_condition(expr: ast.Expr, var: str, binds: Mapping[str, Any]) -> tuple[str, str, Any] | None:
    if not isinstance(expr, ast.Binary) or expr.op not in (*_FLIP, "in", "not in"):
        return None
    op, left, right = expr.op, expr.left, expr.right
    if path_of(left, var) is None and op in _FLIP:
        op, left, right = _FLIP[op], right, left
    path = path_of(left, var)
    if path is None or path[0] in SYSTEM_ATTRIBUTES or free_vars(right):
        return None
    value = evaluate(right, {}, binds)
    if op in ("in", "not in"):
        ok = isinstance(value, list) and all(_scalar(v) for v in value)
    elif op in (">", ">="):
        ok = _scalar(value) and not isinstance(value, str)
    else:
        ok = op in ("==", "!=") and _scalar(value)
    return (".".join(path), _MONGO[op], value) if ok else None


def vector_filter(
    filters: list[ast.Expr], var: str, binds: Mapping[str, Any]
) -> tuple[dict[str, dict[str, Any]], tuple[ast.Expr, ...]]:
    """Split FILTERs into the index's metadata filter and the residual conjuncts."""
    pushed: dict[str, dict[str, Any]] = {}
    residual: list[ast.Expr] = []
    for flt in filters:
        for part in conjuncts(flt):
            cond = _vector_condition(part, var, binds)
            if cond is None or cond[1] in pushed.get(cond[0], {}):
                residual.append(part)
            else:
                pushed.setdefault(cond[0], {})[cond[1]] = cond[2]
    return pushed, tuple(residual)


def key_lookup(filters: list[ast.Expr], var: str) -> tuple[ast.Expr, bool] | None:
    """``v._key == <constant>`` → (key, False); ``v._key IN <constant>`` → (keys, True)."""
    for flt in filters:
        for part in conjuncts(flt):
            if isinstance(part, ast.Binary) and part.op == "==":
                for a, b in ((part.left, part.right), (part.right, part.left)):
                    if path_of(a, var) == ["_key"] and not free_vars(b):
                        return b, False
            is_in = isinstance(part, ast.Binary) and part.op == "in"
            if is_in and path_of(part.left, var) == ["_key"] and not free_vars(part.right):
                return part.right, True
    return None


def similarity_sort(sort: ast.Sort, var: str) -> ast.Call | None:
    if len(sort.items) != 1 or sort.items[0][1]:
        return None
    expr = sort.items[0][0]
    if isinstance(expr, ast.Call) and expr.name == "SIMILARITY" and len(expr.args) == 2:
        field_, vector = expr.args
        if path_of(field_, var) == [EMBEDDING] and var not in free_vars(vector):
            return expr
    return None
