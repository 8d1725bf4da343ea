"""The AQL syntax tree: frozen dataclasses, so plans can compare and rewrite sub-expressions
structurally (``==``) and share them safely across requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class Expr:
    """Base of every expression node."""


@dataclass(frozen=True)
class Literal(Expr):
    value: Any


@dataclass(frozen=True)
class Bind(Expr):
    name: str


@dataclass(frozen=True)
class Var(Expr):
    name: str


@dataclass(frozen=True)
class Attr(Expr):
    obj: Expr
    name: str


@dataclass(frozen=True)
class Index(Expr):
    obj: Expr
    key: Expr


@dataclass(frozen=True)
class Array(Expr):
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Object(Expr):
    pairs: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True)
class Unary(Expr):
    op: str  # "-", "not"
    operand: Expr


@dataclass(frozen=True)
class Binary(Expr):
    op: str  # "or and == != < <= > >= in not in like + - * / % .."
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Ternary(Expr):
    condition: Expr
    then: Expr
    otherwise: Expr


@dataclass(frozen=True)
class Call(Expr):
    name: str  # upper case
    args: tuple[Expr, ...]


@dataclass(frozen=True)
class Score(Expr):
    """The similarity score the vector index returned for ``var`` (planner rewrite of SIMILARITY)."""

    var: str


# -- collections ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CollectionRef:
    name: str | None = None  # a literal name
    bind: str | None = None  # @@name


# -- operations --------------------------------------------------------------------------------
@dataclass(frozen=True)
class For:
    var: str
    source: Expr | CollectionRef  # a bare name resolves to a collection unless it is a variable


@dataclass(frozen=True)
class Filter:
    expr: Expr


@dataclass(frozen=True)
class Let:
    var: str
    expr: Expr


@dataclass(frozen=True)
class Sort:
    items: tuple[tuple[Expr, bool], ...]  # (expression, ascending)


@dataclass(frozen=True)
class Limit:
    offset: Expr
    count: Expr


Operation = For | Filter | Let | Sort | Limit


# -- terminals ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Return:
    expr: Expr
    distinct: bool = False


@dataclass(frozen=True)
class Insert:
    document: Expr
    collection: CollectionRef


@dataclass(frozen=True)
class Update:
    key: Expr
    changes: Expr
    collection: CollectionRef


@dataclass(frozen=True)
class Remove:
    key: Expr
    collection: CollectionRef


@dataclass(frozen=True)
class Upsert:
    key: Expr
    insert: Expr
    update: Expr
    collection: CollectionRef


@dataclass(frozen=True)
class Infer:
    model: Expr
    prompt: Expr
    domain: Expr | None = None
    lora: Expr | None = None
    options: Expr | None = None


@dataclass(frozen=True)
class Embed:
    text: Expr
    model: Expr | None = None


@dataclass(frozen=True)
class EmbedDocument:
    urn: Expr


@dataclass(frozen=True)
class Rag:
    question: Expr
    collection: CollectionRef
    top: Expr | None = None
    domain: Expr | None = None
    model: Expr | None = None
    options: Expr | None = None


Terminal = Return | Insert | Update | Remove | Upsert | Infer | Embed | EmbedDocument | Rag
WRITES = (Insert, Update, Remove, Upsert)


@dataclass(frozen=True)
class Query:
    operations: tuple[Operation, ...]
    terminal: Terminal
    explain: bool = False
