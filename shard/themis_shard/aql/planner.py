"""AST → plan, a pure function: name resolution, checks, and the choice of access paths.

Access paths for ``FOR v IN collection`` (the first FOR, or any later one for joins):

* **lookup** — a pushed FILTER ``v._key == <constant>``: one routed point read;
* **vector** — the outermost loop followed by ``SORT SIMILARITY(v.embedding, <vector>) DESC``
  and ``LIMIT``: top-k through the vector index; FILTER conjuncts that the index's metadata
  filter expresses exactly enough (``== != IN NOT IN`` and ``> >=`` on numbers) are pushed
  into it, the rest run on the over-fetched hits;
* **scan** — ring-aware scatter-gather: each shard scans the rows it is first owner of,
  applies the FILTERs that mention only ``v`` (pushed down), and, for the outermost loop,
  sorts and truncates to ``offset + count`` itself; the coordinator merges SORT/LIMIT.

Everything that can be refused is refused here, before any I/O: unknown variables,
collections, functions and bind parameters, and wrongly typed constants (LIMIT, TOP,
collection binds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ThemisError
from ..storage.collections import CollectionConfig
from ..storage.names import COLLECTION_RE
from . import ast
from .errors import missing_bind, semantic, type_error, unknown_collection
from .evaluate import FUNCTIONS
from .exprs import constant, free_vars, replace, walk
from .nodes import (
    FilterNode,
    IterNode,
    JoinNode,
    LetNode,
    LimitNode,
    LookupNode,
    Node,
    Plan,
    ScanNode,
    SortNode,
    VectorNode,
)
from .pushdown import equi_join, key_lookup, project, similarity_sort, vector_filter


def _count(expr: ast.Expr, binds: Mapping[str, Any], what: str) -> int:
    try:
        value = constant(expr, binds)
    except ThemisError:
        raise type_error(f"{what} must be a constant") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise type_error(f"{what} must be a non-negative integer, got {value!r}")
    return value


class _Planner:
    def __init__(
        self, binds: Mapping[str, Any], collections: Mapping[str, CollectionConfig] | None, max_search_k: int
    ) -> None:
        self.binds = binds
        self.collections = collections
        self.max_search_k = max_search_k
        self.scope: set[str] = set()

    def check(self, expr: ast.Expr) -> None:
        for node in walk(expr):
            if isinstance(node, ast.Var) and node.name not in self.scope:
                raise semantic(f"unknown variable {node.name!r}", "aql_unknown_variable")
            if isinstance(node, ast.Bind) and node.name not in self.binds:
                raise missing_bind(node.name)
            if isinstance(node, ast.Call):
                spec = FUNCTIONS.get(node.name)
                if spec is None:
                    raise semantic(f"unknown function {node.name}()", "aql_unknown_function")
                if not spec[1] <= len(node.args) <= spec[2]:
                    arity = str(spec[1]) if spec[1] == spec[2] else f"{spec[1]} to {spec[2]}"
                    raise semantic(
                        f"{node.name}() takes {arity} argument(s), got {len(node.args)}",
                        "aql_wrong_arguments",
                    )

    def declare(self, var: str) -> None:
        if var in self.scope:
            raise semantic(f"variable {var!r} is already defined", "aql_variable_redefined")
        self.scope.add(var)

    def collection(self, ref: ast.CollectionRef, *, must_exist: bool = True) -> str:
        name = ref.name
        if ref.bind is not None:  # ArangoDB's convention: @@c is given as "@c" in bind_vars
            slot = "@" + ref.bind if "@" + ref.bind in self.binds else ref.bind
            if slot not in self.binds:
                raise missing_bind("@" + ref.bind)
            name = self.binds[slot]
            if not isinstance(name, str):
                raise type_error(f"bind parameter @@{ref.bind} must be a collection name (a string)")
        if not COLLECTION_RE.fullmatch(name):
            raise semantic(
                f"invalid collection name {name!r}: use 1-64 of [a-z0-9_-]", "invalid_collection_name"
            )
        if must_exist and self.collections is not None and name not in self.collections:
            raise unknown_collection(name)
        return name

    def for_collection(self, op: ast.For) -> str | None:
        if isinstance(op.source, ast.CollectionRef):
            return self.collection(op.source)
        if isinstance(op.source, ast.Var) and op.source.name not in self.scope:
            return self.collection(ast.CollectionRef(op.source.name))
        return None

    def plan(self, query: ast.Query) -> Plan:
        ops = list(query.operations)
        terminal = query.terminal
        nodes: list[Node] = []
        fragments = 0
        i = 0
        while i < len(ops):
            op = ops[i]
            if isinstance(op, ast.For):
                coll = self.for_collection(op)
                if coll is None:
                    self.check(op.source)
                    self.declare(op.var)
                    nodes.append(IterNode(op.var, op.source))
                    i += 1
                    continue
                self.declare(op.var)
                j = i + 1
                pushed: list[ast.Expr] = []
                while j < len(ops) and isinstance(ops[j], ast.Filter) and free_vars(ops[j].expr) <= {op.var}:
                    self.check(ops[j].expr)
                    pushed.append(ops[j].expr)
                    j += 1
                outer = all(isinstance(n, LetNode) for n in nodes)
                nxt = ops[j] if j < len(ops) else None
                after = ops[j + 1] if j + 1 < len(ops) else None
                similarity = similarity_sort(nxt, op.var) if isinstance(nxt, ast.Sort) else None
                config = self.collections.get(coll) if self.collections is not None else None
                indexed = config is None or config.indexed
                if outer and similarity is not None and isinstance(after, ast.Limit) and indexed:
                    self.check(similarity)
                    offset = _count(after.offset, self.binds, "LIMIT offset")
                    count = _count(after.count, self.binds, "LIMIT count")
                    k = offset + count
                    if k > self.max_search_k:
                        raise semantic(
                            f"a similarity query may fetch at most {self.max_search_k} results", "k_too_large"
                        )
                    flt, residual = vector_filter(pushed, op.var, self.binds)
                    fetch = k if not residual else min(self.max_search_k, max(k * 10, k))
                    nodes.append(VectorNode(op.var, coll, similarity.args[1], k, fetch, flt, residual))
                    nodes.append(LimitNode(offset, count))
                    rest = replace(tuple(ops[j + 2 :]), similarity, ast.Score(op.var))
                    ops = ops[: j + 2] + list(rest)
                    terminal = replace(terminal, similarity, ast.Score(op.var))
                    i = j + 2
                    continue
                lookup = key_lookup(pushed, op.var)
                if lookup is not None:
                    nodes.append(LookupNode(op.var, coll, lookup[0], tuple(pushed), many=lookup[1]))
                    i = j
                    continue
                sort: tuple = ()
                top = None
                if (
                    outer
                    and isinstance(nxt, ast.Sort)
                    and all(free_vars(e) <= {op.var} for e, _ in nxt.items)
                ):
                    sort = nxt.items
                    if isinstance(after, ast.Limit):
                        top = _count(after.offset, self.binds, "LIMIT offset") + _count(
                            after.count, self.binds, "LIMIT count"
                        )
                elif outer and isinstance(nxt, ast.Limit):
                    top = _count(nxt.offset, self.binds, "LIMIT offset") + _count(
                        nxt.count, self.binds, "LIMIT count"
                    )
                scan = ScanNode(op.var, coll, tuple(pushed), sort, top, fragments)
                fragments += 1
                join = None if outer or not isinstance(nxt, ast.Filter) else equi_join(nxt.expr, op.var)
                if join is not None:
                    self.check(nxt.expr)
                    nodes.append(JoinNode(scan, join[0], join[1]))
                    if join[2] is not None:
                        nodes.append(FilterNode(join[2]))
                    i = j + 1
                    continue
                nodes.append(scan)
                i = j
                continue
            if isinstance(op, ast.Filter):
                self.check(op.expr)
                nodes.append(FilterNode(op.expr))
            elif isinstance(op, ast.Let):
                self.check(op.expr)
                self.declare(op.var)
                nodes.append(LetNode(op.var, op.expr))
            elif isinstance(op, ast.Sort):
                for expr, _ in op.items:
                    self.check(expr)
                nodes.append(SortNode(op.items))
            elif isinstance(op, ast.Limit):
                nodes.append(
                    LimitNode(
                        _count(op.offset, self.binds, "LIMIT offset"),
                        _count(op.count, self.binds, "LIMIT count"),
                    )
                )
            i += 1
        collection = self.terminal(terminal)
        return Plan(tuple(project(nodes, terminal)), terminal, collection, query.explain)

    def terminal(self, t: ast.Terminal) -> str | None:
        for value in vars(t).values():
            if isinstance(value, ast.Expr):
                self.check(value)
        match t:
            case ast.Insert(_, coll) | ast.Upsert(_, _, _, coll):
                return self.collection(coll, must_exist=False)
            case ast.Update(_, _, coll) | ast.Remove(_, coll):
                return self.collection(coll)
            case ast.Infer(model=model) | ast.Embed(model=model) if model is not None:
                if not isinstance(constant(model, self.binds), str):
                    raise type_error("the model must be a string")
            case ast.Rag(collection=coll, top=top):
                name = self.collection(coll)
                config = self.collections.get(name) if self.collections is not None else None
                if config is not None and not config.indexed:
                    raise semantic(
                        f"RAG needs a vector index on {name!r}: declare it with a dimension", "not_indexed"
                    )
                if top is not None and _count(top, self.binds, "TOP") > self.max_search_k:
                    raise semantic(f"TOP may be at most {self.max_search_k}", "k_too_large")
                return name
        return None


def plan(
    query: ast.Query,
    binds: Mapping[str, Any] | None = None,
    collections: Mapping[str, CollectionConfig] | None = None,
    *,
    max_search_k: int = 1000,
) -> Plan:
    """Plan ``query``. ``collections`` None skips existence checks (a peer re-planning a fragment)."""
    binds = binds or {}
    if not isinstance(binds, Mapping):
        raise type_error("bind_vars must be an object")
    return _Planner(binds, collections, max_search_k).plan(query)
