"""AQL on a seeded shard: a table of queries and the results they must return."""

from __future__ import annotations

import pytest

from .conftest import fail, run

CASES = [
    # (query, bind vars, expected result)
    ("RETURN 1 + 2 * 3", {}, [7]),
    ("RETURN [1, 'a', null, true, {x: 1}]", {}, [[1, "a", None, True, {"x": 1}]]),
    ("LET x = @n RETURN x * 2", {"n": 21}, [42]),
    ("FOR i IN 1..5 FILTER i % 2 == 1 RETURN i", {}, [1, 3, 5]),
    ("FOR i IN [3, 1, 2] SORT i DESC RETURN i", {}, [3, 2, 1]),
    ("RETURN 7 / 2", {}, [3.5]),
    ("RETURN 1 / 0", {}, [None]),
    ("RETURN 'a' + 1", {}, [None]),
    ("RETURN 1 == true", {}, [False]),
    ("RETURN null < 0 AND 0 < '' AND '' < [] AND [] < {}", {}, [True]),
    ("RETURN 'abc' LIKE 'a%'", {}, [True]),
    ("RETURN 2 IN [1, 2] ? 'yes' : 'no'", {}, ["yes"]),
    ("RETURN CONCAT('a', 1, null, [2])", {}, ["a1[2]"]),
    ("RETURN [LENGTH('abc'), UPPER('x'), ROUND(2.5), SUM([1, 2, 'x']), AVG([])]", {}, [[3, "X", 3, 3, None]]),
    ("RETURN MERGE({a: 1, b: 1}, {b: 2})", {}, [{"a": 1, "b": 2}]),
    ("RETURN SIMILARITY([1, 0], [0, 1])", {}, [0.0]),
    ("RETURN @o.a.b[1]", {"o": {"a": {"b": [10, 20]}}}, [20]),
    # documents: scan, filter, sort, limit, projections
    ("FOR u IN users FILTER u.age > 30 SORT u.name RETURN u.name", {}, ["Alice", "Carol"]),
    ("FOR u IN users SORT u.age DESC, u.name ASC LIMIT 3 RETURN u._key", {}, ["carol", "alice", "bob"]),
    ("FOR u IN users SORT u.age, u.name LIMIT 1, 2 RETURN u.name", {}, ["Bob", "Erin"]),
    (
        "FOR u IN users FILTER u.city == @city SORT u._key RETURN {n: u.name, a: u.age}",
        {"city": "Paris"},
        [{"n": "Bob", "a": 27}, {"n": "Erin", "a": 27}],
    ),
    ("FOR u IN users FILTER 'dev' IN u.tags SORT u._key RETURN u._key", {}, ["alice", "bob"]),
    ("FOR u IN users FILTER u.tags == null RETURN u._key", {}, ["erin"]),
    ("FOR u IN users FILTER u.city NOT IN ['Berlin', 'Paris'] RETURN u._key", {}, ["dave"]),
    ("FOR u IN users FILTER u.name LIKE 'C%' OR u.age < 20 SORT u.age RETURN u._key", {}, ["dave", "carol"]),
    ("FOR u IN users SORT u._key RETURN DISTINCT u.city", {}, ["Berlin", "Paris", "Rome"]),
    ("FOR u IN @@c FILTER u._key == 'bob' RETURN u.age", {"@c": "users"}, [27]),
    (
        "FOR u IN users FILTER u._key == @k RETURN [u._urn, u._version]",
        {"k": "dave"},
        [["urn:themis:users:dave", 1]],
    ),
    ("FOR u IN users FILTER u._key == 'nobody' RETURN u", {}, []),
    (
        "FOR u IN users FILTER u._key IN @ks SORT u._key RETURN u.age",
        {"ks": ["erin", "bob", "nobody", 3, "bob"]},
        [27, 27],
    ),
    ("FOR u IN users FILTER u._key IN 'alice' RETURN u", {}, []),
    (
        "FOR u IN users LET decade = FLOOR(u.age / 10) * 10 FILTER decade == 20 SORT u._key RETURN u._key",
        {},
        ["bob", "erin"],
    ),
    # joins of FOR loops
    (
        "FOR u IN users FOR o IN orders FILTER o.user == u._key SORT o.total DESC RETURN [u.name, o.total]",
        {},
        [["Bob", 99], ["Alice", 30], ["Alice", 12.5], ["Dave", 5]],
    ),
    (
        "FOR o IN orders FILTER o.total > 10 FOR u IN users FILTER u._key == o.user "
        "SORT o._key RETURN u.city",
        {},
        ["Berlin", "Berlin", "Paris"],
    ),
    (
        "FOR u IN users FILTER u.city == 'Berlin' FOR o IN orders FILTER o.user == u._key "
        "LET t = o.total * 2 SORT t RETURN t",
        {},
        [25.0, 60],
    ),
    # vector similarity through the index
    (
        "FOR p IN passages SORT SIMILARITY(p.embedding, @v) DESC LIMIT 3 RETURN p._key",
        {"v": [1, 0, 0]},
        ["p1", "p2", "p6"],
    ),
    (
        "FOR p IN passages FILTER p.topic == 'med' SORT SIMILARITY(p.embedding, @v) DESC LIMIT 1 "
        "RETURN p._key",
        {"v": [1, 0, 0]},
        ["p4"],
    ),
    (
        "FOR p IN passages FILTER p.year >= 2020 AND p.topic IN ['law', 'tax'] "
        "SORT SIMILARITY(p.embedding, @v) DESC LIMIT 2 RETURN p._key",
        {"v": [0, 0, 1]},
        ["p5", "p2"],
    ),
    (
        "FOR p IN passages FILTER LENGTH(p.text) < 18 SORT SIMILARITY(p.embedding, @v) DESC LIMIT 2 "
        "RETURN p._key",
        {"v": [1, 0, 0]},
        ["p6", "p4"],
    ),
    (
        "FOR p IN passages SORT SIMILARITY(p.embedding, @v) DESC LIMIT 1, 1 "
        "RETURN {k: p._key, s: ROUND(SIMILARITY(p.embedding, @v), 3)}",
        {"v": [0, 1, 0]},
        [{"k": "p4", "s": 0.988}],
    ),
    ("FOR p IN passages SORT SIMILARITY(p.embedding, @v) DESC LIMIT 0 RETURN p", {"v": [1, 0, 0]}, []),
    ("FOR u IN users SORT u.age LIMIT 0 RETURN u", {}, []),
]


@pytest.mark.parametrize(("query", "binds", "expected"), CASES, ids=[c[0][:60] for c in CASES])
def test_query_returns_expected_result(shared, query, binds, expected):
    assert run(shared, query, **binds) == expected


def test_stats_report_scan_and_index_use(aql):
    body = aql.post("/v1/aql", json={"query": "FOR u IN users FILTER u.age > 30 RETURN u"}).json()
    assert body["stats"]["index"] == ["scan:users"]
    assert body["stats"]["scanned"] == 5
    assert body["stats"]["result_count"] == 2
    assert {"plan_ms", "execution_ms", "shards", "kind"} <= set(body["stats"])
    body = aql.post(
        "/v1/aql",
        json={
            "query": "FOR p IN passages SORT SIMILARITY(p.embedding, @v) DESC LIMIT 2 RETURN p",
            "bind_vars": {"v": [1, 0, 0]},
        },
    ).json()
    assert body["stats"]["index"] == ["vector:passages"]
    assert body["stats"]["scanned"] == 2  # the index returned k rows: nothing was scanned


# -- writes -------------------------------------------------------------------------------------
def test_insert_update_upsert_remove(aql):
    [ins] = run(aql, "INSERT {_key: 'zed', name: 'Zed', meta: {a: 1}} INTO users")
    assert ins == {"op": "insert", "_key": "zed", "_urn": "urn:themis:users:zed", "_version": 1}
    run(aql, "UPDATE 'zed' WITH {age: 50, meta: {b: 2}} IN users")
    assert run(aql, "FOR u IN users FILTER u._key == 'zed' RETURN [u.age, u.meta, u._version]") == [
        [50, {"a": 1, "b": 2}, 2]
    ]
    assert run(aql, "UPSERT 'zed' INSERT {n: 0} UPDATE {n: 1} IN users")[0]["op"] == "update"
    assert run(aql, "UPSERT 'new' INSERT {n: 0} UPDATE {n: 1} IN users")[0]["op"] == "insert"
    assert run(aql, "FOR u IN users FILTER u._key IN ['zed', 'new'] SORT u._key RETURN u.n") == [0, 1]
    assert run(aql, "REMOVE 'zed' IN users")[0]["op"] == "remove"
    assert run(aql, "FOR u IN users FILTER u._key == 'zed' RETURN u") == []


def test_insert_without_key_generates_one(aql):
    [ins] = run(aql, "INSERT @doc INTO notes", doc={"text": "hi"})
    assert run(aql, "FOR n IN notes RETURN [n._key, n.text]") == [[ins["_key"], "hi"]]


def test_several_writes_in_one_query_commit_together(aql):
    assert len(run(aql, "FOR u IN users FILTER u.city == 'Paris' UPDATE u WITH {moved: true} IN users")) == 2
    assert run(aql, "FOR u IN users FILTER u.moved == true SORT u._key RETURN u._key") == ["bob", "erin"]
    # one failing row (alice exists) aborts every insert of the statement
    err = fail(aql, "FOR k IN ['fresh1', 'alice', 'fresh2'] INSERT {_key: k} INTO users")
    assert err["status"] == 409
    assert run(aql, "FOR u IN users FILTER u._key LIKE 'fresh%' RETURN u") == []


def test_write_errors(aql):
    assert fail(aql, "UPDATE 'ghost' WITH {a: 1} IN users")["code"] == "document_not_found"
    assert fail(aql, "REMOVE 'ghost' IN users")["status"] == 404
    assert fail(aql, "INSERT 5 INTO users")["code"] == "aql_type_error"
    assert fail(aql, "INSERT {_key: 'bad key!'} INTO users")["code"] == "invalid_key"
    assert fail(aql, "UPDATE 'alice' WITH {a: 1} IN nowhere")["code"] == "aql_unknown_collection"


# -- inference through the gateway ---------------------------------------------------------------
def test_infer_passes_model_domain_adapter_and_options(aql, gateway):
    [out] = run(
        aql,
        "INFER 'gemma' @p DOMAIN 'legal' LORA 'contracts' OPTIONS {max_tokens: 8, temperature: 0}",
        p="Is this valid?",
    )
    assert gateway.calls == [
        (
            "infer",
            {
                "prompt": "Is this valid?",
                "model": "gemma",
                "domain": "legal",
                "adapter": "contracts",
                "max_tokens": 8,
                "temperature": 0,
            },
        )
    ]
    assert out["shard_id"] == "shard-legal"


def test_for_over_requests_is_one_batch(aql, gateway):
    reqs = [{"q": "a", "d": "legal"}, {"q": "b", "d": None}, {"q": "c", "d": "med"}]
    out = run(aql, "FOR r IN @reqs INFER 'm' r.q DOMAIN r.d OPTIONS {max_tokens: 4}", reqs=reqs)
    assert [o["text"] for o in out] == ["echo:a", "echo:b", "echo:c"]
    [(kind, bodies)] = gateway.calls
    assert kind == "infer_batch"
    assert [b["domain"] for b in bodies] == ["legal", None, "med"]


def test_infer_over_documents(aql, gateway):
    out = run(aql, "FOR u IN users FILTER u.city == 'Paris' SORT u._key INFER 'm' CONCAT('Hello ', u.name)")
    assert [o["text"] for o in out] == ["echo:Hello Bob", "echo:Hello Erin"]


def test_embed_and_embed_document(aql, gateway):
    assert run(aql, "EMBED @t", t="contract law") == [[1.0, 0.05, 0.0]]
    assert run(aql, "EMBED DOCUMENT @u", u="urn:themis:passages:p3") == [[0.0, 1.0, 0.0]]
    assert [c[0] for c in gateway.calls] == ["embed"]  # the stored vector needed no model call
    assert run(aql, "EMBED DOCUMENT 'urn:themis:users:bob'") == [[0.0, 1.0, 0.0]]
    assert fail(aql, "EMBED DOCUMENT 'urn:themis:users:ghost'")["status"] == 404
    assert fail(aql, "EMBED DOCUMENT 'not-a-urn'")["code"] == "invalid_urn"


def test_rag_returns_answer_and_the_urns_used(aql, gateway):
    [out] = run(
        aql,
        "RAG @q FROM passages TOP 2 DOMAIN 'legal' USING MODEL 'gemma' OPTIONS {max_tokens: 8}",
        q="what is contract law?",
    )
    assert out["urns"] == ["urn:themis:passages:p1", "urn:themis:passages:p2"]
    assert out["shard_id"] == "shard-legal"
    [_, (_, body)] = gateway.calls
    assert body["domain"] == "legal" and body["model"] == "gemma" and body["max_tokens"] == 8
    assert "contracts and torts" in body["prompt"] and "criminal procedure" in body["prompt"]
    assert "oncology" not in body["prompt"]


def test_inference_errors(aql):
    assert fail(aql, "INFER 'm' 42")["code"] == "aql_type_error"
    assert fail(aql, "INFER 'm' 'hi' OPTIONS {bogus: 1}")["code"] == "aql_type_error"
    assert fail(aql, "INFER @m 'hi'", m=3)["code"] == "aql_type_error"
    assert fail(aql, "RAG 'q' FROM users")["code"] == "not_indexed"


# -- EXPLAIN ------------------------------------------------------------------------------------
def test_explain_shows_access_paths_without_running(aql, gateway):
    [plan] = run(
        aql,
        "EXPLAIN FOR p IN passages FILTER p.topic == 'law' AND LENGTH(p.text) > 3 "
        "SORT SIMILARITY(p.embedding, @v) DESC LIMIT 5 RETURN p",
        v=[1, 0, 0],
    )
    [step, _limit] = plan["steps"]
    assert step["type"] == "vector" and step["index"] == "vector"
    assert step["pushed_filter"] == {"topic": {"$eq": "law"}}
    assert step["residual_filters"] == ["(LENGTH(p.text) > 3)"]
    assert plan["shards"] == ["shard-0"]
    [plan] = run(aql, "EXPLAIN FOR u IN users FILTER u._key == 'bob' RETURN u")
    assert plan["steps"][0]["type"] == "lookup"
    [plan] = run(aql, "EXPLAIN UPDATE @k WITH {a: 1} IN users", k="bob")
    assert plan["terminal"]["coordinator"] == "shard-0" and plan["shards"] == ["shard-0"]
    [plan] = run(aql, "EXPLAIN FOR u IN users UPDATE u WITH {a: 1} IN users")
    assert plan["terminal"]["coordinator"] is None  # per row, decided at run time
    assert run(aql, "FOR u IN users FILTER u.a == 1 RETURN u") == []  # EXPLAIN wrote nothing
    [plan] = run(aql, "EXPLAIN INFER 'm' 'x' DOMAIN 'legal'")
    assert plan["terminal"]["routing"]["domain"] == "legal"
    assert plan["terminal"]["mode"] == "single (/v1/infer)"
    assert gateway.calls == []


# -- semantic errors and limits -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "binds", "code"),
    [
        ("FOR u IN nowhere RETURN u", {}, "aql_unknown_collection"),
        ("RETURN @missing", {}, "aql_missing_bind_var"),
        ("FOR u IN @@c RETURN u", {}, "aql_missing_bind_var"),
        ("FOR u IN @@c RETURN u", {"@c": 5}, "aql_type_error"),
        ("RETURN x", {}, "aql_unknown_variable"),
        ("RETURN NOPE(1)", {}, "aql_unknown_function"),
        ("RETURN LENGTH(1, 2)", {}, "aql_wrong_arguments"),
        ("FOR u IN users LIMIT -1 RETURN u", {}, "aql_type_error"),
        ("FOR u IN users LIMIT @n RETURN u", {"n": "ten"}, "aql_type_error"),
        ("FOR x IN 5 RETURN x", {}, "aql_type_error"),
        ("FOR u IN users FOR u IN orders RETURN u", {}, "aql_variable_redefined"),
        (
            "FOR p IN passages SORT SIMILARITY(p.embedding, @v) DESC LIMIT 2 RETURN p",
            {"v": "x"},
            "aql_type_error",
        ),
        (
            "FOR p IN passages SORT SIMILARITY(p.embedding, @v) DESC LIMIT 2 RETURN p",
            {"v": [1, 0]},
            "dimension_mismatch",
        ),
        ("FOR i IN 1..10000000 RETURN i", {}, "aql_type_error"),
    ],
)
def test_semantic_errors_are_400(shared, query, binds, code):
    err = fail(shared, query, **binds)
    assert (err["status"], err["code"]) == (400, code), err


def test_result_size_limit(aql):
    aql.app.state.node.aql.settings.max_result_rows = 3
    err = fail(aql, "FOR i IN 1..10 RETURN i")
    assert err["code"] == "result_too_large"


def test_join_size_limit(aql):
    aql.app.state.node.aql.settings.max_rows = 1000
    assert fail(aql, "FOR i IN 1..100 FOR j IN 1..100 RETURN 1")["code"] == "result_too_large"


def test_request_validation(aql):
    assert aql.post("/v1/aql", json={"bind_vars": {}}).status_code == 400
    assert aql.post("/v1/aql", json={"query": "RETURN 1", "bind_vars": []}).status_code == 400


def test_explain_infer_shows_the_adaptive_routers_choice_for_the_domain(aql):
    from themis_shard.cluster.routing.router import AdaptiveShardRouter, Capability

    class View:  # gossip's view: shard-2 announced a 'legal' adapter
        def capabilities(self, domain):
            return [Capability("shard-2", "legal", 0.9, 5.0, "legal-lora")] if domain == "legal" else []

        def loads(self):
            return {}

    node = aql.app.state.node
    node.cluster.router = AdaptiveShardRouter(View(), lambda key: ["shard-0"], lambda: ())
    [plan] = run(aql, "EXPLAIN INFER 'm' @p DOMAIN @d", p="x", d="legal")
    best = plan["terminal"]["routing"]["candidates"][0]
    assert (best["shard"], best["adapter"], best["fallback"]) == ("shard-2", "legal-lora", False)
    [plan] = run(aql, "EXPLAIN INFER 'm' @p", p="x")
    assert plan["terminal"]["routing"]["candidates"][0]["fallback"] is True  # no domain: the ring decides


def test_update_of_a_document_read_earlier_is_optimistic(aql):
    [bob] = run(aql, "FOR u IN users FILTER u._key == 'bob' RETURN u")
    run(aql, "UPDATE 'bob' WITH {age: 28} IN users")  # someone else commits first
    err = fail(aql, "UPDATE @doc WITH {age: 99} IN users", doc=bob)
    assert (err["status"], err["code"]) == (409, "version_conflict")
    assert run(aql, "FOR u IN users FILTER u._key == 'bob' RETURN u.age") == [28]


def test_metrics_count_queries_by_kind_and_outcome(aql):
    run(aql, "FOR u IN users RETURN u._key")
    fail(aql, "RETURN nope")
    text = aql.get("/metrics").text
    assert 'themis_aql_queries_total{kind="read",outcome="ok"} 1.0' in text
    assert 'themis_aql_queries_total{kind="unknown",outcome="rejected"} 1.0' in text
    assert "themis_aql_rows_scanned_total 5.0" in text
    assert 'themis_aql_query_duration_seconds_count{kind="read"} 1.0' in text


def test_query_time_limit(aql):
    aql.app.state.node.aql.settings.timeout_s = 0.001
    err = fail(aql, "FOR i IN 1..300 FOR j IN 1..300 FILTER i * j == -1 RETURN 1")
    assert (err["status"], err["code"]) == (400, "query_timeout")
