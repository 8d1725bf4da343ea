"""Text → :class:`~themis_shard.aql.ast.Query`, with lark (LALR) and one Transformer.

Syntax errors become :class:`AqlSyntaxError` (400 ``aql_syntax_error``) naming the line, the
column and the tokens the grammar would have accepted there. A nesting too deep for the
(recursive) transformer is a 400 too: the parser must never turn bad input into a 500.
"""

from __future__ import annotations

import ast as pyast
import functools
import math

from lark import Lark, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken, VisitError

from . import ast
from .errors import AqlSyntaxError, semantic
from .grammar import GRAMMAR
from .values import finite

MAX_QUERY_CHARS = 64 * 1024
_FRIENDLY = {
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": "a string",
    "BIND": "a bind parameter (@name)",
    "COLLECTION_BIND": "a collection bind parameter (@@name)",
    "CMP_OP": "a comparison",
    "ADD_OP": "'+' or '-'",
    "MUL_OP": "'*', '/' or '%'",
    "$END": "the end of the query",
}


@functools.cache
def _lark() -> Lark:
    """The compiled parser: built once per process, immutable afterwards."""
    return Lark(GRAMMAR, parser="lalr", maybe_placeholders=True)


def _unquote(token: str) -> str:
    body = token[1:-1]
    if "\\" not in body:
        return body
    try:  # JSON/Python-style escapes: \n \t \' \" \\ \uXXXX
        return pyast.literal_eval(f'"{body}"' if token[0] == '"' else f"'{body}'")
    except (ValueError, SyntaxError) as exc:
        raise semantic(f"invalid escape in string literal {token}", "aql_syntax_error") from exc


def _number(text: str) -> int | float:
    try:
        value = float(text) if "." in text or "e" in text or "E" in text else int(text)
    except ValueError:  # more digits than Python converts
        value = math.inf
    value = finite(value)
    if value is None:
        raise semantic(f"number {text[:20]}… is out of range", "aql_syntax_error")
    return value


_CMP = {"==", "!=", "<", "<=", ">", ">="}


@v_args(inline=True)
class _ToAst(Transformer):
    # -- statement ------------------------------------------------------------------------
    def start(self, explain, query):
        return ast.Query(query.operations, query.terminal, explain is not None)

    def query(self, *parts):
        return ast.Query(tuple(parts[:-1]), parts[-1])

    def for_op(self, name, source):
        return ast.For(str(name), source)

    def for_bind(self, name, token):
        return ast.For(str(name), ast.CollectionRef(bind=token[2:]))

    def filter_op(self, expr):
        return ast.Filter(expr)

    def let_op(self, name, expr):
        return ast.Let(str(name), expr)

    def sort_op(self, *items):
        return ast.Sort(tuple(items))

    def sort_item(self, expr, direction):
        return (expr, direction is None or direction.type == "ASC")

    def limit_op(self, first, second):
        if second is None:
            return ast.Limit(ast.Literal(0), first)
        return ast.Limit(first, second)

    # -- terminals --------------------------------------------------------------------------
    def return_op(self, distinct, expr):
        return ast.Return(expr, distinct is not None)

    def insert_op(self, doc, coll):
        return ast.Insert(doc, coll)

    def update_op(self, key, changes, coll):
        return ast.Update(key, changes, coll)

    def remove_op(self, key, coll):
        return ast.Remove(key, coll)

    def upsert_op(self, key, insert, update, coll):
        return ast.Upsert(key, insert, update, coll)

    def infer_op(self, model, prompt, *clauses):
        return ast.Infer(model, prompt, **self._clauses("INFER", clauses))

    def embed_op(self, text, model):
        return ast.Embed(text, model)

    def embed_document_op(self, urn):
        return ast.EmbedDocument(urn)

    def rag_op(self, question, coll, *clauses):
        return ast.Rag(question, coll, **self._clauses("RAG", clauses))

    @staticmethod
    def _clauses(statement, clauses):
        out = {}
        for name, value in clauses:
            if name in out:
                raise semantic(f"{statement} takes {name.upper()} at most once", "aql_syntax_error")
            out[name] = value
        return out

    def domain(self, expr):
        return ("domain", expr)

    def lora(self, expr):
        return ("lora", expr)

    def options(self, expr):
        return ("options", expr)

    def top(self, expr):
        return ("top", expr)

    def using_model(self, model):
        return ("model", model)

    def model(self, token):
        return ast.Bind(token[1:]) if token.type == "BIND" else ast.Literal(_unquote(token))

    def collection(self, token):
        return (
            ast.CollectionRef(bind=token[2:])
            if token.type == "COLLECTION_BIND"
            else ast.CollectionRef(str(token))
        )

    # -- expressions ------------------------------------------------------------------------
    def ternary(self, cond, then, otherwise):
        return ast.Ternary(cond, then, otherwise)

    def or_(self, left, right):
        return ast.Binary("or", left, right)

    def and_(self, left, right):
        return ast.Binary("and", left, right)

    def not_(self, operand):
        return ast.Unary("not", operand)

    def compare(self, left, op, right):
        return ast.Binary(str(op), left, right)

    def in_(self, left, right):
        return ast.Binary("in", left, right)

    def not_in(self, left, right):
        return ast.Binary("not in", left, right)

    def like(self, left, right):
        return ast.Binary("like", left, right)

    def range_(self, low, high):
        return ast.Binary("..", low, high)

    def arith(self, left, op, right):
        return ast.Binary(str(op), left, right)

    def neg(self, operand):
        if isinstance(operand, ast.Literal) and type(operand.value) in (int, float):
            return ast.Literal(-operand.value)
        return ast.Unary("-", operand)

    def attr(self, obj, name):
        return ast.Attr(obj, str(name))

    def index(self, obj, key):
        return ast.Index(obj, key)

    def number(self, token):
        return ast.Literal(_number(token))

    def string(self, token):
        return ast.Literal(_unquote(token))

    def true(self):
        return ast.Literal(True)

    def false(self):
        return ast.Literal(False)

    def null(self):
        return ast.Literal(None)

    def bind(self, token):
        return ast.Bind(token[1:])

    def var(self, token):
        return ast.Var(str(token))

    def call(self, name, *args):
        return ast.Call(str(name).upper(), tuple(a for a in args if a is not None))

    def array(self, *items):
        return ast.Array(tuple(i for i in items if i is not None))

    def object(self, *pairs):
        return ast.Object(tuple(p for p in pairs if p is not None))

    def pair(self, key, value):
        return (_unquote(key) if key.type == "STRING" else str(key), value)

    def shorthand(self, name):
        return (str(name), ast.Var(str(name)))


def _end_position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def _describe(names) -> list[str]:
    lark = _lark()
    out = set()
    for name in names:
        if name in _FRIENDLY:
            out.add(_FRIENDLY[name])
            continue
        try:
            pattern = lark.get_terminal(name).pattern
        except KeyError:
            out.add(name)
            continue
        out.add(f"'{pattern.value}'" if pattern.type == "str" else name.lower())
    return sorted(out)


def _syntax_error(text: str, exc: UnexpectedInput) -> AqlSyntaxError:
    if isinstance(exc, UnexpectedCharacters):
        found = f"unexpected character {text[exc.pos_in_stream]!r}"
        expected = _describe(exc.allowed or ())
        line, column = exc.line, exc.column
    elif isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        found = f"unexpected {exc.token.value!r}"
        expected = _describe(exc.accepts or exc.expected)
        line, column = exc.line, exc.column
    else:
        found = "unexpected end of query"
        expected = _describe(getattr(exc, "accepts", None) or exc.expected)
        line, column = _end_position(text)
    message = f"line {line}, column {column}: {found}"
    if expected:
        message += "; expected one of: " + ", ".join(expected)
    return AqlSyntaxError(message, line, column, expected)


def parse(text: str) -> ast.Query:
    """Parse one AQL statement (optionally prefixed by EXPLAIN)."""
    if not isinstance(text, str) or not text.strip():
        raise AqlSyntaxError("line 1, column 1: empty query", 1, 1, [])
    if len(text) > MAX_QUERY_CHARS:
        raise semantic(f"query is longer than {MAX_QUERY_CHARS} characters", "query_too_long")
    try:
        tree = _lark().parse(text)
        return _ToAst().transform(tree)
    except UnexpectedInput as exc:
        raise _syntax_error(text, exc) from None
    except VisitError as exc:
        if isinstance(exc.orig_exc, RecursionError):
            raise semantic("query is nested too deeply", "query_too_complex") from None
        if isinstance(exc.orig_exc, Exception) and hasattr(exc.orig_exc, "status"):
            raise exc.orig_exc from None
        raise semantic(f"invalid query: {type(exc.orig_exc).__name__}", "aql_syntax_error") from None
    except RecursionError:
        raise semantic("query is nested too deeply", "query_too_complex") from None
