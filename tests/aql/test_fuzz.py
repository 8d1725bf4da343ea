"""Random query strings never crash the shard: every answer is a result or a 4xx error."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEYWORDS = [
    "FOR",
    "IN",
    "FILTER",
    "SORT",
    "LIMIT",
    "RETURN",
    "LET",
    "INSERT",
    "INTO",
    "UPDATE",
    "WITH",
    "REMOVE",
    "UPSERT",
    "INFER",
    "EMBED",
    "DOCUMENT",
    "RAG",
    "FROM",
    "TOP",
    "DOMAIN",
    "LORA",
    "OPTIONS",
    "USING",
    "MODEL",
    "EXPLAIN",
    "ASC",
    "DESC",
    "DISTINCT",
    "AND",
    "OR",
    "NOT",
    "LIKE",
    "true",
    "null",
]
SYMBOLS = [
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "+",
    "-",
    "*",
    "/",
    "%",
    "..",
    ".",
    ",",
    ":",
    "?",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "=",
    "!",
    "&&",
    "||",
]
ATOMS = [
    "d",
    "u",
    "x",
    "users",
    "passages",
    "orders",
    "d.age",
    "d._key",
    "d.embedding",
    "@v",
    "@n",
    "@s",
    "@@c",
    "@missing",
    "0",
    "1",
    "-3",
    "2.5",
    "1e308",
    "'a'",
    '"b"',
    "'law'",
    "[1,0,0]",
    "{a: 1}",
    "SIMILARITY(d.embedding, @v)",
    "LENGTH(d)",
    "NOPE(1)",
    "1..3",
    "99999999999999999999999",
    "1e300",
]
BINDS = {"v": [1, 0, 0], "n": 2, "s": "law", "@c": "users"}

tokens = st.lists(st.sampled_from(KEYWORDS + SYMBOLS + ATOMS), min_size=1, max_size=14).map(" ".join)
raw_text = st.text(min_size=1, max_size=60)


@st.composite
def shaped_queries(draw) -> str:
    """Mostly well-formed statements with random expressions: reaches planner and executor."""
    expr = st.recursive(
        st.sampled_from(ATOMS),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from([*SYMBOLS[:11], "AND", "OR", "IN", "LIKE"]), inner).map(
                " ".join
            ),
            inner.map(lambda e: f"({e})"),
            inner.map(lambda e: f"NOT {e}"),
            st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        ),
        max_leaves=6,
    )
    head = draw(
        st.sampled_from(
            [
                "FOR d IN users",
                "FOR d IN passages",
                "FOR d IN @@c",
                "FOR d IN [1, 2]",
                "FOR d IN 1..3 FOR u IN orders",
                "LET d = @n",
                "",
            ]
        )
    )
    ops = draw(
        st.lists(
            st.one_of(
                expr.map(lambda e: f"FILTER {e}"),
                expr.map(lambda e: f"SORT {e} DESC"),
                st.sampled_from(["LIMIT 2", "LIMIT @n", "LIMIT 1, 1", "LIMIT -1", "LIMIT 'x'"]),
                expr.map(lambda e: f"LET z{draw(st.integers(0, 3))} = {e}"),
            ),
            max_size=3,
        )
    )
    tail = draw(
        st.one_of(
            expr.map(lambda e: f"RETURN {e}"),
            expr.map(lambda e: f"INFER 'm' {e}"),
            expr.map(lambda e: f"EMBED {e}"),
            expr.map(lambda e: f"UPDATE {e} WITH {{f: 1}} IN users"),
            expr.map(lambda e: f"RAG {e} FROM passages TOP 2"),
        )
    )
    return " ".join(p for p in [draw(st.sampled_from(["", "EXPLAIN"])), head, *ops, tail] if p)


@pytest.fixture(scope="module")
def shard(shared) -> TestClient:
    return shared


def check(client: TestClient, query: str) -> None:
    response = client.post("/v1/aql", json={"query": query, "bind_vars": BINDS})
    assert response.status_code in (200, 400, 404, 409), (query, response.status_code, response.text)
    body = response.json()
    if response.status_code == 200:
        assert isinstance(body["result"], list)
    else:
        assert body["error"]["code"] and body["error"]["message"]


fuzz = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@fuzz
@given(query=st.one_of(tokens, raw_text))
def test_random_strings_give_results_or_4xx(shard, query):
    check(shard, query)


@fuzz
@given(query=shaped_queries())
def test_random_statements_give_results_or_4xx(shard, query):
    check(shard, query)


PATHOLOGICAL = [
    "RETURN " + "(" * 3000 + "1" + ")" * 3000,
    "RETURN " + "[" * 3000 + "]" * 3000,
    "RETURN " + "-" * 5000 + "1",
    "RETURN " + " + ".join(["1"] * 4000),
    "RETURN 1e308 * 10",
    "RETURN " + "9" * 5000,
    "RETURN " + "9" * 300 + " * 1.5",
    "RETURN 9223372036854775807 * 9223372036854775807 * 9223372036854775807",
    "RETURN LENGTH(UNIQUE(0..999998))",
    "FOR i IN 0..999998 COLLECT",
    "RETURN 'x' " * 20000,
]


@pytest.mark.parametrize("query", PATHOLOGICAL, ids=[q[:30] for q in PATHOLOGICAL])
def test_pathological_queries(shard, query):
    check(shard, query)


def test_non_finite_bind_values_are_refused(shard):
    response = shard.post(
        "/v1/aql",
        content=b'{"query": "RETURN @x", "bind_vars": {"x": [NaN]}}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400, response.text
