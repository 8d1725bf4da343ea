"""The planner is a pure function of (query, bind vars, collection configs): access paths and
pushdown are decided here, testable without a shard."""

from __future__ import annotations

import pytest
from themis_shard.aql import ast
from themis_shard.aql.nodes import (
    FilterNode,
    IterNode,
    JoinNode,
    LimitNode,
    LookupNode,
    ScanNode,
    SortNode,
    VectorNode,
)
from themis_shard.aql.parser import parse
from themis_shard.aql.planner import plan
from themis_shard.errors import BadRequest
from themis_shard.storage.collections import CollectionConfig

COLLECTIONS = {
    "users": CollectionConfig(name="users"),
    "orders": CollectionConfig(name="orders"),
    "docs": CollectionConfig(name="docs", dimension=3),
}


def planned(text, **binds):
    return plan(parse(text), binds, COLLECTIONS)


def test_outer_scan_pushes_filter_sort_and_limit():
    p = planned("FOR u IN users FILTER u.age > 3 SORT u.age DESC LIMIT 5, 10 RETURN u")
    scan = p.nodes[0]
    assert isinstance(scan, ScanNode)
    assert len(scan.filters) == 1 and scan.sort[0][1] is False and scan.top == 15
    # the coordinator still merges: sort, then offset/limit
    assert p.nodes[1:] == (SortNode(scan.sort), LimitNode(5, 10))


def test_inner_loop_joined_by_equality_is_a_hash_join():
    p = planned(
        "FOR u IN users FOR o IN orders FILTER o.total > 1 FILTER o.user == u._key AND o.x != u.y "
        "SORT o.total RETURN o"
    )
    outer, join, residual, sort = p.nodes
    assert isinstance(outer, ScanNode) and outer.filters == () and outer.top is None
    assert isinstance(join, JoinNode) and len(join.scan.filters) == 1 and join.scan.sort == ()
    assert (join.inner_key, join.outer_key) == (
        ast.Attr(ast.Var("o"), "user"),
        ast.Attr(ast.Var("u"), "_key"),
    )
    assert isinstance(residual, FilterNode) and isinstance(sort, SortNode)
    assert (outer.fragment, join.scan.fragment) == (0, 1)
    assert outer.fields == ("_key", "y")  # only what the rest of the query reads travels


def test_non_equality_joins_stay_nested_loops():
    p = planned("FOR u IN users FOR o IN orders FILTER o.total > u.age RETURN o")
    assert [type(n) for n in p.nodes] == [ScanNode, ScanNode, FilterNode]


def test_key_equality_is_a_point_lookup():
    p = planned("FOR u IN users FILTER @k == u._key RETURN u", k="bob")
    assert isinstance(p.nodes[0], LookupNode) and p.nodes[0].key == ast.Bind("k")


def test_similarity_sort_uses_the_vector_index_with_pushdown():
    p = planned(
        "FOR d IN docs FILTER d.tag == 'a' AND d.n >= 2 AND d.m < 3 "
        "SORT SIMILARITY(d.embedding, @v) DESC LIMIT 1, 4 RETURN {d, s: SIMILARITY(d.embedding, @v)}",
        v=[1, 0, 0],
    )
    vec, limit = p.nodes
    assert isinstance(vec, VectorNode)
    assert vec.k == 5 and vec.fetch == 50  # a residual filter over-fetches
    assert vec.filter == {"tag": {"$eq": "a"}, "n": {"$gte": 2}}
    assert len(vec.residual) == 1  # d.m < 3 (null < 3 in AQL; the index filter would drop it)
    assert limit == LimitNode(1, 4)
    assert p.terminal.expr.pairs[1][1] == ast.Score("d")  # SIMILARITY reuses the index score


@pytest.mark.parametrize(
    "text",
    [
        "FOR d IN docs SORT SIMILARITY(d.embedding, @v) ASC LIMIT 3 RETURN d",  # ascending: not index order
        "FOR d IN docs SORT SIMILARITY(d.embedding, @v) DESC RETURN d",  # no LIMIT: no k
        "FOR d IN docs SORT SIMILARITY(d.other, @v) DESC LIMIT 3 RETURN d",  # not the indexed field
        "FOR d IN users SORT SIMILARITY(d.embedding, @v) DESC LIMIT 3 RETURN d",  # no index
    ],
)
def test_similarity_falls_back_to_an_exact_scan(text):
    assert isinstance(planned(text, v=[1, 0, 0]).nodes[0], ScanNode)


def test_for_over_a_value_and_collection_binds():
    p = planned("FOR x IN @xs FOR u IN @@c RETURN [x, u]", xs=[1], **{"@c": "users"})
    assert isinstance(p.nodes[0], IterNode) and p.nodes[1].collection == "users"


def test_write_collection_resolution():
    assert planned("INSERT {} INTO brand_new").collection == "brand_new"  # inserts create collections
    with pytest.raises(BadRequest, match="does not exist"):
        planned("REMOVE 'k' IN brand_new")
    with pytest.raises(BadRequest, match="invalid collection name"):
        planned("INSERT {} INTO @@c", **{"@c": "Bad Name"})


def test_peers_plan_without_collection_checks():
    assert plan(parse("FOR x IN unknown_here RETURN x"), {}, None).nodes[0].collection == "unknown_here"


def test_kinds():
    assert [
        planned(q, p="x", v=[1]).kind
        for q in ("RETURN 1", "INSERT {} INTO users", "INFER 'm' @p", "EMBED @p", "RAG @p FROM docs")
    ] == ["read", "write", "infer", "embed", "rag"]


def test_key_in_a_constant_list_is_a_multi_key_lookup():
    node = planned("FOR u IN users FILTER u._key IN @ks RETURN u", ks=["a", "b"]).nodes[0]
    assert isinstance(node, LookupNode) and node.many and node.key == ast.Bind("ks")
