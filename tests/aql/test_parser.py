"""The grammar: what parses into which tree, and how syntax errors are reported."""

from __future__ import annotations

import pytest
from themis_shard.aql import ast
from themis_shard.aql.errors import AqlSyntaxError
from themis_shard.aql.parser import parse

d = ast.Var("d")


def test_for_filter_sort_limit_return():
    q = parse("for d in users filter d.age >= 30 sort d.age desc, d.name limit 2, 5 return {name: d.name, d}")
    assert q.operations == (
        ast.For("d", ast.Var("users")),
        ast.Filter(ast.Binary(">=", ast.Attr(d, "age"), ast.Literal(30))),
        ast.Sort(((ast.Attr(d, "age"), False), (ast.Attr(d, "name"), True))),
        ast.Limit(ast.Literal(2), ast.Literal(5)),
    )
    assert q.terminal == ast.Return(ast.Object((("name", ast.Attr(d, "name")), ("d", d))))


def test_operator_precedence():
    q = parse("RETURN NOT a OR b AND c == 1 + 2 * -x")
    mul = ast.Binary("*", ast.Literal(2), ast.Unary("-", ast.Var("x")))
    cmp = ast.Binary("==", ast.Var("c"), ast.Binary("+", ast.Literal(1), mul))
    assert q.terminal.expr == ast.Binary(
        "or", ast.Unary("not", ast.Var("a")), ast.Binary("and", ast.Var("b"), cmp)
    )


@pytest.mark.parametrize(
    ("text", "terminal"),
    [
        ("INSERT @doc INTO users", ast.Insert(ast.Bind("doc"), ast.CollectionRef("users"))),
        (
            "UPDATE 'k' WITH {a: 1} IN @@c",
            ast.Update(ast.Literal("k"), ast.Object((("a", ast.Literal(1)),)), ast.CollectionRef(bind="c")),
        ),
        ("REMOVE @k IN users", ast.Remove(ast.Bind("k"), ast.CollectionRef("users"))),
        (
            "UPSERT 'k' INSERT {} UPDATE {} IN users",
            ast.Upsert(ast.Literal("k"), ast.Object(()), ast.Object(()), ast.CollectionRef("users")),
        ),
        (
            "INFER 'gemma' @p DOMAIN 'legal' LORA 'a' OPTIONS {max_tokens: 8}",
            ast.Infer(
                ast.Literal("gemma"),
                ast.Bind("p"),
                ast.Literal("legal"),
                ast.Literal("a"),
                ast.Object((("max_tokens", ast.Literal(8)),)),
            ),
        ),
        ("EMBED @t MODEL 'minilm'", ast.Embed(ast.Bind("t"), ast.Literal("minilm"))),
        ("EMBED DOCUMENT @urn", ast.EmbedDocument(ast.Bind("urn"))),
        (
            "RAG @q FROM docs TOP 3 DOMAIN 'legal' USING MODEL 'm'",
            ast.Rag(
                ast.Bind("q"),
                ast.CollectionRef("docs"),
                ast.Literal(3),
                ast.Literal("legal"),
                ast.Literal("m"),
            ),
        ),
    ],
)
def test_statements(text, terminal):
    assert parse(text).terminal == terminal


def test_explain_and_comments_and_strings():
    q = parse("EXPLAIN // the plan only\n RETURN /* inline */ ['a\\'b', \"c\\nd\", 1.5e3]")
    assert q.explain
    assert q.terminal.expr == ast.Array((ast.Literal("a'b"), ast.Literal("c\nd"), ast.Literal(1500.0)))


def test_keywords_are_names_after_a_dot():
    assert parse("RETURN d.filter.limit").terminal.expr == ast.Attr(ast.Attr(d, "filter"), "limit")


def test_batch_infer_form():
    q = parse("FOR r IN @requests INFER 'm' r.prompt DOMAIN r.domain")
    assert q.operations == (ast.For("r", ast.Bind("requests")),)
    assert q.terminal.domain == ast.Attr(ast.Var("r"), "domain")


@pytest.mark.parametrize(
    ("text", "line", "column", "expected"),
    [
        ("FOR d IN users RETURN", 1, 22, "a name"),
        ("FOR d IN users\n  FILTER d.age >\n", 3, 1, "a number"),
        ("FOR d users RETURN d", 1, 7, "'IN'"),
        ("RETURN 1 +* 2", 1, 11, "a number"),
        ("FOR d IN users FILTER d.x == $ RETURN d", 1, 30, "a bind parameter (@name)"),
        ("SELECT * FROM t", 1, 1, "'FOR'"),
    ],
)
def test_syntax_errors_name_line_column_and_expected_tokens(text, line, column, expected):
    with pytest.raises(AqlSyntaxError) as info:
        parse(text)
    err = info.value
    assert (err.line, err.column) == (line, column)
    assert expected in err.expected
    assert err.message.startswith(f"line {line}, column {column}: ")
    assert err.status == 400 and err.code == "aql_syntax_error"


@pytest.mark.parametrize(
    "text", ["", "   ", "INFER 'm' 'p' DOMAIN 'a' DOMAIN 'b'", "RETURN 1e999", "RETURN '\\x'"]
)
def test_other_bad_input_is_a_400(text):
    with pytest.raises(Exception) as info:
        parse(text)
    assert info.value.status == 400
