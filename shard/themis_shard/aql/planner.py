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

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ThemisError
from ..storage.collections import CollectionConfig
from ..storage.names import COLLECTION_RE
from . import ast
from .errors import missing_bind, semantic, type_error, unknown_collection
from .evaluate import FUNCTIONS, evaluate

EMBEDDING = "embedding"
SYSTEM_ATTRIBUTES = ("_key", "_urn", "_version")


# -- plan nodes --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScanNode:
    var: str
    collection: str
    filters: tuple[ast.Expr, ...] = ()
    sort: tuple[tuple[ast.Expr, bool], ...] = ()
    top: int | None = None
    fragment: int = 0
    #: Top-level attributes the rest of the query reads (None: the whole document). Shards ship
    #: only these (plus the system attributes): a scan that returns ``d.n`` moves no embeddings.
    fields: tuple[str, ...] | None = None


@dataclass(frozen=True)
class LookupNode:
    var: str
    collection: str
    key: ast.Expr
    filters: tuple[ast.Expr, ...] = ()
    #: ``_key IN <list>``: ``key`` evaluates to a list of keys, read in parallel.
    many: bool = False


@dataclass(frozen=True)
class VectorNode:
    var: str
    collection: str
    vector: ast.Expr
    k: int
    fetch: int
    filter: dict = field(default_factory=dict, hash=False)
    residual: tuple[ast.Expr, ...] = ()


@dataclass(frozen=True)
class JoinNode:
    """An inner FOR over a collection joined by equality (``FILTER inner.x == <outer expr>``):
    the scan runs once, is hashed on ``inner_key``, and every outer row probes it."""

    scan: ScanNode
    inner_key: ast.Expr
    outer_key: ast.Expr


@dataclass(frozen=True)
class IterNode:
    var: str
    source: ast.Expr


@dataclass(frozen=True)
class FilterNode:
    expr: ast.Expr


@dataclass(frozen=True)
class LetNode:
    var: str
    expr: ast.Expr


@dataclass(frozen=True)
class SortNode:
    items: tuple[tuple[ast.Expr, bool], ...]


@dataclass(frozen=True)
class LimitNode:
    offset: int
    count: int


Node = ScanNode | JoinNode | LookupNode | VectorNode | IterNode | FilterNode | LetNode | SortNode | LimitNode


@dataclass(frozen=True)
class Plan:
    nodes: tuple[Node, ...]
    terminal: ast.Terminal
    #: The terminal's collection (writes, RAG), resolved from a name or an @@bind.
    collection: str | None = None
    explain: bool = False

    @property
    def kind(self) -> str:
        return {
            ast.Return: "read",
            ast.Insert: "write",
            ast.Update: "write",
            ast.Remove: "write",
            ast.Upsert: "write",
            ast.Infer: "infer",
            ast.Embed: "embed",
            ast.EmbedDocument: "embed",
            ast.Rag: "rag",
        }[type(self.terminal)]

    def scan(self, fragment: int) -> ScanNode:
        for node in self.nodes:
            if isinstance(node, ScanNode) and node.fragment == fragment:
                return node
        raise semantic(f"the plan has no scan fragment {fragment}", "invalid_request")


# -- expression helpers ------------------------------------------------------------------------
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


def _expressions(item: Any) -> list[ast.Expr]:
    """Every expression inside a plan node or terminal."""
    if isinstance(item, ast.Expr):
        return [item]
    if isinstance(item, tuple):
        return [e for i in item for e in _expressions(i)]
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return [e for f in dataclasses.fields(item) for e in _expressions(getattr(item, f.name))]
    return []


def _project(nodes: list, terminal: ast.Terminal) -> list:
    """Give each scan the attributes the nodes after it (and the terminal) read."""
    out = list(nodes)
    for i, node in enumerate(nodes):
        scan = node.scan if isinstance(node, JoinNode) else node
        if not isinstance(scan, ScanNode):
            continue
        later = (node.inner_key,) if isinstance(node, JoinNode) else ()
        fields: set[str] | None = set()
        for expr in _expressions((later, tuple(nodes[i + 1 :]), terminal)):
            used = attributes_used(expr, scan.var)
            if used is None:
                fields = None
                break
            fields |= used
        if fields is not None:
            scan = dataclasses.replace(scan, fields=tuple(sorted(fields)))
            out[i] = dataclasses.replace(node, scan=scan) if isinstance(node, JoinNode) else scan
    return out


def _equi_join(flt: ast.Expr, var: str) -> tuple[ast.Expr, ast.Expr, ast.Expr | None] | None:
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


def conjuncts(expr: ast.Expr) -> list[ast.Expr]:
    if isinstance(expr, ast.Binary) and expr.op == "and":
        return conjuncts(expr.left) + conjuncts(expr.right)
    return [expr]


def constant(expr: ast.Expr, binds: Mapping[str, Any]) -> Any:
    if free_vars(expr):
        raise type_error("expected a constant (literals and bind parameters only)")
    return evaluate(expr, {}, binds)


def _count(expr: ast.Expr, binds: Mapping[str, Any], what: str) -> int:
    try:
        value = constant(expr, binds)
    except ThemisError:
        raise type_error(f"{what} must be a constant") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise type_error(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _path(expr: ast.Expr, var: str) -> list[str] | None:
    """``v.a.b`` → ["a", "b"]; anything else → None."""
    names: list[str] = []
    while isinstance(expr, ast.Attr):
        names.append(expr.name)
        expr = expr.obj
    if isinstance(expr, ast.Var) and expr.name == var and names:
        return names[::-1]
    return None


# -- vector filter pushdown --------------------------------------------------------------------
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_MONGO = {"==": "$eq", "!=": "$ne", ">": "$gt", ">=": "$gte", "in": "$in", "not in": "$nin"}


def _scalar(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, int | float) and not isinstance(v, bool))


def _vector_condition(expr: ast.Expr, var: str, binds: Mapping[str, Any]) -> tuple[str, str, Any] | None:
    if not isinstance(expr, ast.Binary) or expr.op not in (*_FLIP, "in", "not in"):
        return None
    op, left, right = expr.op, expr.left, expr.right
    if _path(left, var) is None and op in _FLIP:
        op, left, right = _FLIP[op], right, left
    path = _path(left, var)
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


def _key_lookup(filters: list[ast.Expr], var: str) -> tuple[ast.Expr, bool] | None:
    """``v._key == <constant>`` → (key, False); ``v._key IN <constant>`` → (keys, True)."""
    for flt in filters:
        for part in conjuncts(flt):
            if isinstance(part, ast.Binary) and part.op == "==":
                for a, b in ((part.left, part.right), (part.right, part.left)):
                    if _path(a, var) == ["_key"] and not free_vars(b):
                        return b, False
            is_in = isinstance(part, ast.Binary) and part.op == "in"
            if is_in and _path(part.left, var) == ["_key"] and not free_vars(part.right):
                return part.right, True
    return None


def _similarity_sort(sort: ast.Sort, var: str) -> ast.Call | None:
    if len(sort.items) != 1 or sort.items[0][1]:
        return None
    expr = sort.items[0][0]
    if isinstance(expr, ast.Call) and expr.name == "SIMILARITY" and len(expr.args) == 2:
        field_, vector = expr.args
        if _path(field_, var) == [EMBEDDING] and var not in free_vars(vector):
            return expr
    return None


# -- the planner -------------------------------------------------------------------------------
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
        if not COLLECTION_RE.match(name):
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
                similarity = _similarity_sort(nxt, op.var) if isinstance(nxt, ast.Sort) else None
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
                lookup = _key_lookup(pushed, op.var)
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
                join = None if outer or not isinstance(nxt, ast.Filter) else _equi_join(nxt.expr, op.var)
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
        return Plan(tuple(_project(nodes, terminal)), terminal, collection, query.explain)

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
