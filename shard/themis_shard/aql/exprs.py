"""Pure helpers over expression trees: traversal, free variables, rewriting, constants."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from . import ast
from .errors import type_error
from .evaluate import evaluate


def children(expr: ast.Expr) -> list[ast.Expr]:
    match expr:
        case ast.Attr(obj, _):
            return [obj]
        case ast.Index(obj, key):
            return [obj, key]
        case ast.Array(items):
            return list(items)
        case ast.Object(pairs):
            return [v for _, v in pairs]
        case ast.Unary(_, operand):
            return [operand]
        case ast.Binary(_, left, right):
            return [left, right]
        case ast.Ternary(c, t, o):
            return [c, t, o]
        case ast.Call(_, args):
            return list(args)
    return []


def walk(expr: ast.Expr):
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(children(node))


def free_vars(expr: ast.Expr) -> set[str]:
    return {n.name for n in walk(expr) if isinstance(n, ast.Var)} | {
        n.var for n in walk(expr) if isinstance(n, ast.Score)
    }


def replace(tree: Any, target: ast.Expr, replacement: ast.Expr) -> Any:
    """A copy of ``tree`` (an expression, operation, terminal or tuple) with ``target`` replaced."""
    if tree == target and isinstance(tree, ast.Expr):
        return replacement
    if isinstance(tree, tuple):
        return tuple(replace(t, target, replacement) for t in tree)
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        changes = {
            f.name: replace(getattr(tree, f.name), target, replacement) for f in dataclasses.fields(tree)
        }
        return dataclasses.replace(tree, **changes)
    return tree


def attributes_used(expr: ast.Expr, var: str) -> set[str] | None:
    """Top-level attributes of ``var`` that ``expr`` reads; None when it uses ``var`` whole."""
    used: set[str] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        root, first = node, None
        while isinstance(root, ast.Attr | ast.Index):
            if isinstance(root, ast.Attr):
                first = root.name
            elif isinstance(root.key, ast.Literal) and isinstance(root.key.value, str):
                first = root.key.value
            else:
                first = None
                break
            root = root.obj
        if isinstance(root, ast.Var) and root.name == var and first is not None and root is not node:
            used.add(first)
            stack.extend(c for n in _index_keys(node) for c in [n])
            continue
        if isinstance(node, ast.Var) and node.name == var:
            return None
        stack.extend(children(node))
    return used


def _index_keys(expr: ast.Expr) -> list[ast.Expr]:
    out = []
    while isinstance(expr, ast.Attr | ast.Index):
        if isinstance(expr, ast.Index):
            out.append(expr.key)
        expr = expr.obj
    return out


def expressions(item: Any) -> list[ast.Expr]:
    """Every expression inside a plan node or terminal."""
    if isinstance(item, ast.Expr):
        return [item]
    if isinstance(item, tuple):
        return [e for i in item for e in expressions(i)]
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [e for f in dataclasses.fields(item) for e in expressions(getattr(item, f.name))]
    return []


def conjuncts(expr: ast.Expr) -> list[ast.Expr]:
    if isinstance(expr, ast.Binary) and expr.op == "and":
        return conjuncts(expr.left) + conjuncts(expr.right)
    return [expr]


def constant(expr: ast.Expr, binds: Mapping[str, Any]) -> Any:
    if free_vars(expr):
        raise type_error("expected a constant (literals and bind parameters only)")
    return evaluate(expr, {}, binds)


def path_of(expr: ast.Expr, var: str) -> list[str] | None:
    """``v.a.b`` → ["a", "b"]; anything else → None."""
    names: list[str] = []
    while isinstance(expr, ast.Attr):
        names.append(expr.name)
        expr = expr.obj
    if isinstance(expr, ast.Var) and expr.name == var and names:
        return names[::-1]
    return None
