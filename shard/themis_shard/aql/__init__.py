"""AQL — the Themis query language over documents, vectors and inference (API.md "Query language").

One statement per request, ``POST /v1/aql {"query", "bind_vars"}`` → ``{"result": [...], "stats"}``::

    [EXPLAIN]
    ( FOR v IN collection | @@coll | <expr>      -- a collection, or any array value
    | FILTER <expr> | LET v = <expr>
    | SORT <expr> [ASC|DESC], ... | LIMIT [offset,] count )*
    ( RETURN [DISTINCT] <expr>
    | INSERT <obj> INTO coll | UPDATE <key|doc> WITH <obj> IN coll | REMOVE <key|doc> IN coll
    | UPSERT <key|doc> INSERT <obj> UPDATE <obj> IN coll
    | INFER <'model'|@m> <prompt> [DOMAIN d] [LORA a] [OPTIONS {max_tokens, temperature, ...}]
    | EMBED <text> [MODEL 'm'] | EMBED DOCUMENT <urn>
    | RAG <question> FROM coll [TOP k] [DOMAIN d] [USING MODEL 'm'] [OPTIONS {...}] )

Expressions: literals (numbers, 'strings', "strings", true/false/null, [arrays], {objects}),
``@bind`` parameters (values never enter the query text), variables, ``a.b`` / ``a[expr]``,
``+ - * / %``, ``== != < <= > >=``, ``IN``/``NOT IN``/``LIKE``, ``AND``/``&&``, ``OR``/``||``,
``NOT``/``!``, ``cond ? a : b``, ``lo..hi`` ranges, and the functions in ``evaluate.FUNCTIONS``
(``SIMILARITY(a, b)`` is cosine similarity; in ``SORT … DESC LIMIT k`` it runs on the vector
index). Documents carry the system attributes ``_key``, ``_urn`` and ``_version``.

Writes of one statement (a FOR that writes many rows too) commit as one transaction: on the
keys' one coordinator, or by two-phase commit when they live on several shards
(``cluster/transactions``).
``FOR r IN @requests INFER …`` sends one ``/v1/infer:batch``.

Modules: ``grammar``/``parser`` (text → ``ast``), ``planner`` (pure: AST → ``nodes.Plan``, with
the rules in ``pushdown`` and the tree helpers in ``exprs``), ``evaluate``/``values`` (pure
expression semantics), ``executor`` (runs a plan), ``data`` (storage edge: ring-aware
scatter-gather; ``codec`` ships fragments to peers), ``gateway`` (inference edge), ``explain``,
``service`` (per-shard entry point), ``settings`` (limits), ``metrics``.
"""
