"""EXPLAIN: a plan as JSON — access paths, pushed-down work, shards touched, routing. Pure."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from . import ast
from .exprs import constant, free_vars
from .nodes import (
    FilterNode,
    IterNode,
    JoinNode,
    LetNode,
    LimitNode,
    LookupNode,
    Plan,
    ScanNode,
    SortNode,
    VectorNode,
)


def render(expr: ast.Expr) -> str:
    """AQL text for an expression (bind parameters stay parameters)."""
    match expr:
        case ast.Literal(value):
            return json.dumps(value)
        case ast.Bind(name):
            return f"@{name}"
        case ast.Var(name):
            return name
        case ast.Score(var):
            return f"SCORE({var})"
        case ast.Attr(obj, name):
            return f"{render(obj)}.{name}"
        case ast.Index(obj, key):
            return f"{render(obj)}[{render(key)}]"
        case ast.Array(items):
            return "[" + ", ".join(render(i) for i in items) + "]"
        case ast.Object(pairs):
            return "{" + ", ".join(f"{json.dumps(k)}: {render(v)}" for k, v in pairs) + "}"
        case ast.Unary(op, operand):
            return f"{'NOT ' if op == 'not' else '-'}{render(operand)}"
        case ast.Binary(op, left, right):
            return f"({render(left)} {op.upper() if op[0].isalpha() else op} {render(right)})"
        case ast.Ternary(c, t, o):
            return f"({render(c)} ? {render(t)} : {render(o)})"
        case ast.Call(name, args):
            return f"{name}(" + ", ".join(render(a) for a in args) + ")"
    return type(expr).__name__


def _sort(items) -> list[str]:
    return [f"{render(e)} {'ASC' if asc else 'DESC'}" for e, asc in items]


def describe(
    plan: Plan,
    binds: Mapping[str, Any],
    *,
    members: list[str],
    owners: Callable[[str, Any], list[str]],
    routing: Callable[[Any], dict] | None = None,
) -> dict:
    """The plan, the shards each step touches and, for inference, how it will be routed."""
    steps: list[dict[str, Any]] = []
    shards: set[str] = set()
    for node in plan.nodes:
        match node:
            case ScanNode():
                steps.append(
                    {
                        "type": "scan",
                        "collection": node.collection,
                        "var": node.var,
                        "index": None,
                        "pushed_filters": [render(f) for f in node.filters],
                        "pushed_sort": _sort(node.sort),
                        "pushed_limit": node.top,
                        "shards": members,
                        "distribution": "scatter-gather, first owner per key",
                    }
                )
                shards |= set(members)
            case JoinNode():
                scan = node.scan
                steps.append(
                    {
                        "type": "hash_join",
                        "collection": scan.collection,
                        "var": scan.var,
                        "index": None,
                        "on": f"{render(node.inner_key)} == {render(node.outer_key)}",
                        "pushed_filters": [render(f) for f in scan.filters],
                        "shards": members,
                        "distribution": "scatter-gather once, hashed on the coordinator",
                    }
                )
                shards |= set(members)
            case LookupNode():
                key = constant(node.key, binds)
                keys = key if node.many and isinstance(key, list) else [] if node.many else [key]
                who = sorted({owners(node.collection, k)[0] for k in keys})
                steps.append(
                    {
                        "type": "lookup",
                        "collection": node.collection,
                        "var": node.var,
                        "index": "primary",
                        "key": key,
                        "shards": who,
                        "filters": [render(f) for f in node.filters],
                    }
                )
                shards |= set(who)
            case VectorNode():
                steps.append(
                    {
                        "type": "vector",
                        "collection": node.collection,
                        "var": node.var,
                        "index": "vector",
                        "k": node.k,
                        "fetch": node.fetch,
                        "pushed_filter": node.filter,
                        "residual_filters": [render(f) for f in node.residual],
                        "shards": members,
                    }
                )
                shards |= set(members)
            case IterNode():
                steps.append({"type": "for", "var": node.var, "source": render(node.source)})
            case FilterNode():
                steps.append({"type": "filter", "expr": render(node.expr)})
            case LetNode():
                steps.append({"type": "let", "var": node.var, "expr": render(node.expr)})
            case SortNode():
                steps.append({"type": "sort", "by": _sort(node.items)})
            case LimitNode():
                steps.append({"type": "limit", "offset": node.offset, "count": node.count})
    t = plan.terminal
    terminal: dict[str, Any] = {"type": type(t).__name__.lower()}
    if plan.collection is not None:
        terminal["collection"] = plan.collection
    if plan.kind == "write":
        terminal["transaction"] = (
            "all writes commit atomically: on their one coordinator, or by two-phase commit "
            "across the shards that coordinate them"
        )
        coordinator = _write_coordinator(t, plan, binds, owners)
        terminal["coordinator"] = coordinator
        if coordinator is not None:
            shards.add(coordinator)
    if isinstance(t, ast.Return):
        terminal["expr"] = render(t.expr)
    if isinstance(t, ast.Infer | ast.Rag) and routing is not None:
        domain = constant(t.domain, binds) if t.domain is not None and not _uses_rows(t.domain) else None
        terminal["routing"] = routing(domain)
    if isinstance(t, ast.Rag):
        terminal["retrieval"] = {"index": "vector", "shards": members}
        shards |= set(members)
    batched = isinstance(t, ast.Infer) and any(
        isinstance(n, ScanNode | JoinNode | LookupNode | VectorNode | IterNode) for n in plan.nodes
    )
    if isinstance(t, ast.Infer):
        terminal["mode"] = "batch (/v1/infer:batch)" if batched else "single (/v1/infer)"
    return {"kind": plan.kind, "steps": steps, "terminal": terminal, "shards": sorted(shards)}


def _uses_rows(expr: ast.Expr) -> bool:
    return bool(free_vars(expr))


def _write_coordinator(
    t: ast.Terminal, plan: Plan, binds: Mapping[str, Any], owners: Callable[[str, Any], list[str]]
) -> str | None:
    """The shard that will commit a single-row write whose key is a constant; None otherwise
    (the key depends on the rows, or INSERT generates one)."""
    if any(not isinstance(n, LetNode) for n in plan.nodes):
        return None
    target = t.document if isinstance(t, ast.Insert) else t.key
    if _uses_rows(target):
        return None
    value = constant(target, binds)
    key = value.get("_key") if isinstance(value, dict) else value
    if not isinstance(key, str):
        return None
    return owners(plan.collection, key)[0]
