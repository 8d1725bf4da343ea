"""Plan nodes: what the planner decides and the executor runs (frozen, comparable)."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import ast

EMBEDDING = "embedding"
SYSTEM_ATTRIBUTES = ("_key", "_urn", "_version")


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
