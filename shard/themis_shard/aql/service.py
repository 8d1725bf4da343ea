"""One shard's AQL entry point: parse (cached) → plan → execute, and the peer side of scans.

Built once per ShardNode (``node.aql``), never module-level, so several shards can live in one
process. The gateway (INFER/EMBED/RAG) is the node's in-process inference pipeline, acting for
each query's caller.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool

from ..errors import ThemisError, check_unicode
from ..storage.codec import check_depth
from ..tenants.caller import Caller
from . import ast
from .data import NodeData, decode_scan
from .errors import limit_exceeded, type_error
from .executor import Executor
from .explain import describe
from .gateway import CallerBound, InferenceGateway
from .metrics import AqlMetrics
from .nodes import Plan
from .parser import parse
from .planner import plan
from .settings import AqlSettings

_CACHE_SIZE = 512


def check_bind_values(binds: Mapping[str, Any]) -> None:
    """Bind values are JSON, but Python's JSON accepts NaN/Infinity: refuse them up front."""
    stack: list[Any] = list(binds.values())
    while stack:
        value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise type_error("bind_vars may not hold NaN or Infinity")
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


class AqlService:
    def __init__(self, node, gateway: InferenceGateway, settings: AqlSettings | None = None) -> None:
        self.node = node
        self.settings = settings or AqlSettings()
        self.data = NodeData(node)
        self.gateway = gateway
        self._parsed: OrderedDict[str, ast.Query] = OrderedDict()
        self.metrics = AqlMetrics(node.metrics.registry)

    def parse(self, text: str) -> ast.Query:
        query = self._parsed.get(text)
        if query is None:
            query = parse(text)
            self._parsed[text] = query
            if len(self._parsed) > _CACHE_SIZE:
                self._parsed.popitem(last=False)
        else:
            self._parsed.move_to_end(text)
        return query

    async def plan(self, text: str, binds: Mapping[str, Any]) -> Plan:
        query = self.parse(text)
        k = self.node.settings.max_search_k
        try:
            return plan(query, binds, self.data.collections(), max_search_k=k)
        except ThemisError as exc:
            if exc.code != "aql_unknown_collection" or not self.node.cluster.topology.clustered:
                raise
        return plan(query, binds, await self.data.cluster_collections(), max_search_k=k)

    def executor(self, caller: Caller | None = None) -> Executor:
        fields = {c.name: c.embed_field for c in self.node.store.collections() if c.embed_field}
        gateway = self.gateway
        if caller is not None and isinstance(gateway, CallerBound):
            gateway = gateway.for_caller(caller)
        return Executor(
            self.data,
            gateway,
            self.settings,
            max_writes=self.node.settings.max_transaction_operations,
            embed_fields=fields,
        )

    async def execute(
        self, text: str, binds: Mapping[str, Any] | None, *, caller: Caller | None = None
    ) -> dict[str, Any]:
        """Run one statement; INFER/EMBED/RAG act for ``caller`` (its role and tenant limits)."""
        started = time.perf_counter()
        kind = "unknown"
        try:
            if binds is None:
                binds = {}
            if not isinstance(binds, Mapping):
                raise type_error("bind_vars must be an object")
            check_unicode([text, binds])
            check_bind_values(binds)
            max_depth = self.node.settings.max_document_depth
            for value in binds.values():
                check_depth(value, max_depth, "bind_value")
            the_plan = await self.plan(text, binds)
            kind = "explain" if the_plan.explain else the_plan.kind
            planned = time.perf_counter()
            if the_plan.explain:
                members, owners = self.data.members(), self.data.owners
                result = [describe(the_plan, binds, members=members, owners=owners, routing=self.routing)]
                stats: dict[str, Any] = {}
            else:
                result, stats = await self.executor(caller).run(the_plan, binds)
                for row in result:  # a deep literal or a nesting built by the query itself
                    check_depth(row, max_depth, "result")
        except RecursionError:  # a pathological nesting that slipped past the parser's guard
            self.metrics.queries.labels(kind=kind, outcome="rejected").inc()
            raise limit_exceeded("the query is nested too deeply", "query_too_complex") from None
        except ThemisError as exc:
            self.metrics.queries.labels(kind=kind, outcome="rejected" if exc.status < 500 else "failed").inc()
            raise
        except Exception:
            self.metrics.queries.labels(kind=kind, outcome="failed").inc()
            raise
        done = time.perf_counter()
        self.metrics.queries.labels(kind=kind, outcome="ok").inc()
        self.metrics.duration.labels(kind=kind).observe(done - started)
        self.metrics.rows_scanned.inc(stats.get("scanned", 0))
        stats.update(
            {
                "kind": the_plan.kind,
                "plan_ms": round((planned - started) * 1000, 3),
                "execution_ms": round((done - planned) * 1000, 3),
                "result_count": len(result),
                "coordinator": self.node.cluster.topology.self_id,
            }
        )
        return {"result": result, "stats": stats}

    def routing(self, domain: str | None) -> dict[str, Any]:
        """How INFER will be routed: the adaptive router's ranking when this shard has one."""
        out: dict[str, Any] = {"via": "/v1/infer", "domain": domain}
        router = self.node.cluster.router
        rank = getattr(router, "rank", None)
        if rank is not None:
            try:
                decisions = rank(domain, domain or "")
                out["candidates"] = [
                    {
                        "shard": d.shard_id,
                        "tier": d.tier,
                        "reason": d.reason,
                        "fallback": d.fallback,
                        "adapter": d.adapter_id,
                    }
                    for d in decisions[:3]
                ]
            except Exception as exc:  # explain must not fail because routing state is odd
                out["candidates_error"] = type(exc).__name__
        return out

    async def scan_fragment(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """A peer's request for this shard's part of a scan (see ``NodeData.scan``)."""
        try:
            node = decode_scan(body["fragment"])
            binds = body.get("bind_vars") or {}
            down = [str(d) for d in body.get("down") or []]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise type_error(f"malformed scan fragment: {exc}") from None
        budget = self.settings.timeout_s
        if isinstance(body.get("timeout_s"), int | float) and body["timeout_s"] > 0:
            budget = min(budget, float(body["timeout_s"]))  # the coordinator's remaining time
        deadline = time.monotonic() + budget
        result = await run_in_threadpool(self.data.local_scan, node, binds, down, deadline)
        return {"rows": result.rows, "scanned": result.scanned}
