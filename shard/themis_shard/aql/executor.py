"""Runs a plan: rows flow through the nodes on the coordinator; scans, lookups and vector
searches go to the data layer (:class:`~themis_shard.aql.data.NodeData`), inference to the
gateway. Writes of one query are collected and committed as one transaction.

Every step checks the query's deadline and row budget, so a runaway query ends in a 400
(``query_timeout``, ``result_too_large``) instead of starving the shard.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ..errors import NotFound, ThemisError
from ..rag.prompt import passage_text, prompt_order, rag_prompt
from ..rag.provenance import cited, pick_seed, replay_record
from ..storage.documents import Change, Write
from ..storage.names import check_key
from ..vector.catalog import EMBEDDING_FIELD
from . import ast
from .errors import limit_exceeded, type_error
from .evaluate import evaluate, score_slot
from .exprs import constant
from .gateway import InferenceGateway
from .nodes import (
    SYSTEM_ATTRIBUTES,
    FilterNode,
    IterNode,
    JoinNode,
    LetNode,
    LimitNode,
    LookupNode,
    Plan,
    ScanNode,
    SortNode,
    VectorNode,
)
from .settings import AqlSettings
from .values import canonical, sort_key, truthy
from .values import distinct as unique

INFER_OPTIONS = {"max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "priority", "speculative"}
#: A RAG body ``/v1/rag:replay`` can re-run (other OPTIONS, e.g. top_p or stop, it cannot).
REPLAYABLE = {
    "prompt",
    "shared_prefix_chars",
    "model",
    "domain",
    "max_tokens",
    "temperature",
    "seed",
    "speculative",
}
ROW_SOURCES = (ScanNode, JoinNode, LookupNode, VectorNode, IterNode)


def lookup_keys(value: Any, many: bool) -> list[Any]:
    """The distinct keys a lookup reads: the value itself, or the strings of an IN list."""
    if not many:
        return [value]
    return list(dict.fromkeys(k for k in value if isinstance(k, str))) if isinstance(value, list) else []


def strip_system(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in SYSTEM_ATTRIBUTES}


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """UPDATE semantics: objects merge recursively, everything else is replaced."""
    out = dict(old)
    for k, v in new.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def key_of(value: Any, what: str) -> str:
    if isinstance(value, dict):
        value = value.get("_key")
    if not isinstance(value, str):
        raise type_error(f"{what} needs a document key (a string, or an object with _key)")
    return check_key(value)


class Stats:
    def __init__(self) -> None:
        self.scanned = 0
        self.shards: set[str] = set()
        self.index: list[str] = []
        self.writes = 0
        self.failed_shards: set[str] = set()

    def as_dict(self) -> dict[str, Any]:
        out = {
            "scanned": self.scanned,
            "shards": sorted(self.shards),
            "index": self.index,
            "writes": self.writes,
        }
        if self.failed_shards:
            out["shards_failed"] = sorted(self.failed_shards)
        return out


class Executor:
    def __init__(
        self,
        data,
        gateway: InferenceGateway,
        settings: AqlSettings,
        *,
        max_writes: int = 1000,
        embed_fields: Mapping[str, str] | None = None,
    ) -> None:
        self.data = data
        self.gateway = gateway
        self.settings = settings
        self.max_writes = max_writes
        self.embed_fields = embed_fields or {}

    async def run(self, plan: Plan, binds: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        run = _Run(self, plan, binds)
        try:
            result = await asyncio.wait_for(run.execute(), self.settings.timeout_s)
        except TimeoutError:
            raise limit_exceeded(
                f"the query ran longer than {self.settings.timeout_s:g}s", "query_timeout"
            ) from None
        except RecursionError:
            raise limit_exceeded("the query is nested too deeply", "query_too_complex") from None
        return result, run.stats.as_dict()


class _Run:
    """One execution: its deadline, budgets, stats and scan cache."""

    def __init__(self, ex: Executor, plan: Plan, binds: Mapping[str, Any]) -> None:
        self.ex = ex
        self.plan = plan
        self.binds = binds
        self.stats = Stats()
        self.deadline = time.monotonic() + ex.settings.timeout_s
        self.scans: dict[int, list[dict]] = {}

    def tick(self, rows: int) -> None:
        if rows > self.ex.settings.max_rows:
            raise limit_exceeded(
                f"the query would hold more than {self.ex.settings.max_rows} rows", "result_too_large"
            )
        if time.monotonic() > self.deadline:
            raise limit_exceeded(
                f"the query ran longer than {self.ex.settings.timeout_s:g}s", "query_timeout"
            )

    def eval(self, expr: ast.Expr, env: Mapping[str, Any]) -> Any:
        return evaluate(expr, env, self.binds)

    async def execute(self) -> list[Any]:
        rows: list[dict[str, Any]] = [{}]
        for node in self.plan.nodes:
            rows = await self.step(node, rows)
            self.tick(len(rows))
        return await self.finish(rows)

    # -- nodes ------------------------------------------------------------------------------
    async def step(self, node, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        match node:
            case ScanNode():
                return self.product(rows, node.var, await self.scan(node))
            case JoinNode():
                table: dict[Any, list[dict]] = {}
                for doc in await self.scan(node.scan):
                    key = canonical(self.eval(node.inner_key, {node.scan.var: doc}))
                    table.setdefault(key, []).append(doc)
                out = []
                for env in rows:
                    matches = table.get(canonical(self.eval(node.outer_key, env)), ())
                    out.extend({**env, node.scan.var: doc} for doc in matches)
                    self.tick(len(out))
                return out
            case LookupNode():
                value = constant(node.key, self.binds)
                keys = lookup_keys(value, node.many)
                if len(keys) > self.ex.settings.max_rows:
                    raise limit_exceeded("too many keys in one lookup", "result_too_large")
                found = await asyncio.gather(*(self.ex.data.lookup(node.collection, k) for k in keys))
                docs = [d for d in found if d is not None]
                self.stats.index.append(f"primary:{node.collection}")
                for key in keys:
                    self.stats.shards |= set(self.ex.data.owners(node.collection, key)[:1])
                self.stats.scanned += len(docs)
                out = self.product(rows, node.var, docs)
                return [env for env in out if all(truthy(self.eval(f, env)) for f in node.filters)]
            case VectorNode():
                return await self.vector(node, rows)
            case IterNode():
                out = []
                for env in rows:
                    values = self.eval(node.source, env)
                    if not isinstance(values, list):
                        raise type_error(
                            f"FOR {node.var} IN … needs an array or a collection, got {type(values).__name__}"
                        )
                    out.extend({**env, node.var: v} for v in values)
                    self.tick(len(out))
                return out
            case FilterNode():
                return [env for env in rows if truthy(self.eval(node.expr, env))]
            case LetNode():
                return [{**env, node.var: self.eval(node.expr, env)} for env in rows]
            case SortNode():
                keyed = [(tuple(self.eval(e, env) for e, _ in node.items), env) for env in rows]
                keyed.sort(key=sort_key(tuple(asc for _, asc in node.items)))
                return [env for _, env in keyed]
            case LimitNode():
                return rows[node.offset : node.offset + node.count]
        raise AssertionError(f"unknown plan node {node!r}")  # pragma: no cover

    async def scan(self, node: ScanNode) -> list[dict]:
        """A scan's rows, fetched once per query (its filters never depend on outer rows)."""
        docs = self.scans.get(node.fragment)
        if docs is None:
            result = await self.ex.data.scan(node, self.binds, self.deadline)
            docs = self.scans[node.fragment] = result.rows
            self.stats.scanned += result.scanned
            self.stats.shards |= set(result.shards)
            self.stats.index.append(f"scan:{node.collection}")
        return docs

    def product(self, rows: list[dict], var: str, docs: list[dict]) -> list[dict]:
        self.tick(len(rows) * len(docs))
        return [{**env, var: doc} for env in rows for doc in docs]

    async def vector(self, node: VectorNode, rows: list[dict]) -> list[dict]:
        vector = constant(node.vector, self.binds)
        if (
            not isinstance(vector, list)
            or not vector
            or any(isinstance(x, bool) or not isinstance(x, int | float) for x in vector)
        ):
            raise type_error("SIMILARITY needs a vector: a non-empty list of numbers")
        if node.fetch == 0:  # LIMIT 0: nothing to ask the index for
            return []
        hits, failed = await self.ex.data.vector_search(
            node.collection, vector, node.fetch, node.filter or None
        )
        self.stats.index.append(f"vector:{node.collection}")
        self.stats.shards |= set(self.ex.data.members())
        self.stats.failed_shards |= set(failed)
        self.stats.scanned += len(hits)
        out = []
        for env in rows:
            for score, doc in hits:
                row = {**env, node.var: doc, score_slot(node.var): score}
                if all(truthy(self.eval(f, row)) for f in node.residual):
                    out.append(row)
        return out[: node.k] if len(rows) == 1 else out

    # -- terminals --------------------------------------------------------------------------
    async def finish(self, rows: list[dict]) -> list[Any]:
        t = self.plan.terminal
        match t:
            case ast.Return(expr, distinct):
                values = [self.eval(expr, env) for env in rows]
                if distinct:
                    values = unique(values)
                return self.result(values)
            case ast.Insert() | ast.Update() | ast.Remove() | ast.Upsert():
                return await self.write(rows)
            case ast.Infer():
                return await self.infer(rows)
            case ast.Embed(text, model):
                texts = [self.eval(text, env) for env in rows]
                if not all(isinstance(x, str) for x in texts):
                    raise type_error("EMBED needs a string")
                if not texts:
                    return []
                name = constant(model, self.binds) if model is not None else None
                return self.result(await self.ex.gateway.embed(texts, name))
            case ast.EmbedDocument(urn):
                return self.result([await self.embed_document(self.eval(urn, env)) for env in rows])
            case ast.Rag():
                return self.result([await self.rag(env) for env in rows])
        raise AssertionError(f"unknown terminal {t!r}")  # pragma: no cover

    def result(self, values: list[Any]) -> list[Any]:
        if len(values) > self.ex.settings.max_result_rows:
            raise limit_exceeded(
                f"the result has more than {self.ex.settings.max_result_rows} rows", "result_too_large"
            )
        return values

    async def current(self, coll: str, key: str, target: Any) -> dict | None:
        """The document an UPDATE/UPSERT changes: the row itself when the query read it from this
        collection (its ``_version`` then guards the commit, so a concurrent change since the read
        is a 409), else a routed read."""
        if (
            isinstance(target, dict)
            and isinstance(target.get("_version"), int)
            and target.get("_urn") == (f"urn:themis:{coll}:{key}")
        ):
            return target
        return await self.ex.data.lookup(coll, key)

    async def write(self, rows: list[dict]) -> list[dict]:
        t = self.plan.terminal
        coll = self.plan.collection
        if len(rows) > self.ex.max_writes:
            raise limit_exceeded(
                f"one query may write at most {self.ex.max_writes} documents", "transaction_too_large"
            )
        writes: list[tuple[str, Write]] = []
        if isinstance(t, ast.Insert):
            for env in rows:
                doc = self.eval(t.document, env)
                if not isinstance(doc, dict):
                    raise type_error("INSERT needs an object")
                key = key_of(doc, "INSERT") if "_key" in doc else uuid.uuid4().hex
                writes.append(("insert", Write(coll, key, strip_system(doc), 0)))
        elif isinstance(t, ast.Remove):
            for env in rows:
                writes.append(("remove", Write(coll, key_of(self.eval(t.key, env), "REMOVE"), None)))
        else:
            targets = [self.eval(t.key, env) for env in rows]
            keys = [key_of(v, type(t).__name__.upper()) for v in targets]
            current = await asyncio.gather(
                *(self.current(coll, k, v) for k, v in zip(keys, targets, strict=True))
            )
            for env, key, doc in zip(rows, keys, current, strict=True):
                if doc is None and isinstance(t, ast.Update):
                    raise NotFound(f"document {coll}/{key} does not exist", code="document_not_found")
                if doc is None:
                    new = self.eval(t.insert, env)
                    if not isinstance(new, dict):
                        raise type_error("UPSERT … INSERT needs an object")
                    writes.append(("insert", Write(coll, key, strip_system(new), 0)))
                    continue
                changes = self.eval(t.changes if isinstance(t, ast.Update) else t.update, env)
                if not isinstance(changes, dict):
                    raise type_error(f"{type(t).__name__.upper()} needs an object of changes")
                writes.append(
                    (
                        "update",
                        Write(coll, key, merge(strip_system(doc), strip_system(changes)), doc["_version"]),
                    )
                )
        if not writes:
            return []
        self.tick(len(writes))
        # Past this point the commit runs to its end even if the query's timer fires: cancelling
        # it between the durable local commit and replication would leave replicas without a hint.
        committed: list[Change] = await asyncio.shield(self.ex.data.commit([w for _, w in writes]))
        self.stats.writes = len(committed)
        self.stats.shards |= set(self.ex.data.owners(coll, writes[0][1].key)[:1])
        return [
            {"op": op, "_key": c.key, "_urn": f"urn:themis:{c.collection}:{c.key}", "_version": c.version}
            for (op, _), c in zip(writes, committed, strict=True)
        ]

    # -- inference --------------------------------------------------------------------------
    def infer_body(self, t: ast.Infer, env: Mapping[str, Any]) -> dict[str, Any]:
        prompt = self.eval(t.prompt, env)
        if not isinstance(prompt, str):
            raise type_error("INFER needs a string prompt")
        body: dict[str, Any] = {"prompt": prompt, "model": constant(t.model, self.binds)}
        for name, expr in (("domain", t.domain), ("adapter", t.lora)):
            if expr is not None:
                value = self.eval(expr, env)
                if value is not None and not isinstance(value, str):
                    raise type_error(f"INFER {'LORA' if name == 'adapter' else 'DOMAIN'} needs a string")
                body[name] = value
        body.update(self.options(t.options, env))
        return body

    def options(self, expr: ast.Expr | None, env: Mapping[str, Any]) -> dict[str, Any]:
        if expr is None:
            return {}
        options = self.eval(expr, env)
        if not isinstance(options, dict):
            raise type_error("OPTIONS needs an object")
        unknown = set(options) - INFER_OPTIONS
        if unknown:
            raise type_error(f"unknown OPTIONS {sorted(unknown)}; use {sorted(INFER_OPTIONS)}")
        return options

    async def infer(self, rows: list[dict]) -> list[dict]:
        t = self.plan.terminal
        bodies = [self.infer_body(t, env) for env in rows]
        if not any(isinstance(n, ROW_SOURCES) for n in self.plan.nodes) and len(bodies) == 1:
            return [await self.ex.gateway.infer(bodies[0])]
        size = self.ex.settings.infer_batch
        chunks = [bodies[i : i + size] for i in range(0, len(bodies), size)]
        results = await asyncio.gather(*(self.ex.gateway.infer_batch(c) for c in chunks))
        return self.result([r for chunk in results for r in chunk])

    async def embed_document(self, urn_value: Any) -> list[float]:
        """The stored embedding when the document has one (no model call); else its text field."""
        if not isinstance(urn_value, str):
            raise type_error("EMBED DOCUMENT needs a URN string")
        collection, doc = await self.ex.data.document(urn_value)
        if doc is None:
            raise NotFound(f"document {urn_value} does not exist", code="document_not_found")
        vector = doc.get(EMBEDDING_FIELD)
        if isinstance(vector, list):
            return vector
        text = self.text_of(collection, doc)
        return (await self.ex.gateway.embed([text]))[0]

    def text_of(self, collection: str, doc: Mapping[str, Any]) -> str:
        return passage_text(doc, self.ex.embed_fields.get(collection))

    async def rag(self, env: Mapping[str, Any]) -> dict[str, Any]:
        t: ast.Rag = self.plan.terminal
        question = self.eval(t.question, env)
        if not isinstance(question, str) or not question.strip():
            raise type_error("RAG needs a non-empty question string")
        k = constant(t.top, self.binds) if t.top is not None else self.ex.settings.rag_top
        vector = (await self.ex.gateway.embed([question]))[0]
        hits, failed = await self.ex.data.vector_search(self.plan.collection, vector, max(1, k), None)
        hits = prompt_order(hits, urn=lambda hit: hit[1]["_urn"])  # same documents, same prefix
        self.stats.index.append(f"vector:{self.plan.collection}")
        self.stats.shards |= set(self.ex.data.members())
        self.stats.failed_shards |= set(failed)
        prompt, shared = rag_prompt(
            question,
            [self.text_of(self.plan.collection, doc) for _, doc in hits],
            passage_chars=self.ex.settings.rag_context_chars,
        )
        body: dict[str, Any] = {"prompt": prompt, "shared_prefix_chars": shared}
        if t.model is not None:
            body["model"] = constant(t.model, self.binds)
        if t.domain is not None:
            domain = self.eval(t.domain, env)
            if domain is not None and not isinstance(domain, str):
                raise type_error("RAG DOMAIN needs a string")
            body["domain"] = domain
        body.update(self.options(t.options, env))
        body["seed"] = pick_seed(body.get("seed"))
        body.setdefault("speculative", self.ex.settings.rag_speculative)
        try:
            answer = await self.ex.gateway.infer(body)
        except ThemisError:
            raise
        sources = [
            {"urn": doc["_urn"], "version": doc.get("_version"), "score": score} for score, doc in hits
        ]
        out = {
            "answer": answer.get("text"),
            "urns": [doc["_urn"] for _, doc in hits],
            "scores": [score for score, _ in hits],
            "sources": cited(sources),
            "shard_id": answer.get("shard_id"),
            "model": answer.get("model"),
            "adapter": answer.get("adapter"),
            "seed": body["seed"],
            "domain": body.get("domain"),
        }
        if set(body) <= REPLAYABLE:  # what /v1/rag:replay re-runs; other sampling it cannot
            out["replay"] = replay_record(
                query=question,
                collection=self.plan.collection,
                sources=sources,
                generation=answer,
                domain=body.get("domain"),
                seed=body["seed"],
                max_tokens=body.get("max_tokens"),
                temperature=body.get("temperature") or 0.0,
                passage_chars=self.ex.settings.rag_context_chars,
                speculative=bool(body["speculative"]),
            )
        return out
