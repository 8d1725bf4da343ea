"""The shard's FastAPI application factory.

``create_app(settings)`` builds one shard: routers, error handlers, middleware, and a lifespan
that opens the node (RocksDB, FAISS, plan, and the inference engine when enabled) and closes
it cleanly — persisting vector indexes — on shutdown.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from themis_core.tracing import Spans

from . import __version__
from .api import (
    adapters,
    aql,
    backup,
    batches,
    channel,
    cluster,
    documents,
    health,
    inference,
    internal,
    kv_prefix,
    no_model,
    openai_compat,
    search,
)
from .api import draft as draft_api
from .api import rag as rag_api
from .api import raid as raid_api
from .api import transactions as transactions_api
from .api.access_log import AccessLogMiddleware
from .api.auth import AuthMiddleware, document_security
from .api.errors import install_error_handlers
from .api.hot_paths import HotDocumentPaths
from .api.middleware import BodyLimitMiddleware, InternalAuth, ListenerGuard, MetricsMiddleware
from .api.openapi import document_engine_limits, document_errors
from .api.tenants import TenantMiddleware
from .metrics import ShardMetrics
from .node import ShardNode
from .otel import build_spans
from .settings import Settings
from .tenants.gate import TenantGate
from .tenants.metrics import TenantMetrics
from .termination import write_termination_message

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, spans: Spans | None = None) -> FastAPI:
    """``spans``: where request and peer-call spans go; default from ``settings.otel`` (ids only
    unless OpenTelemetry is installed and configured)."""
    settings = settings or Settings()
    metrics = ShardMetrics(settings.shard_id)
    spans = spans or build_spans(settings.otel, settings.shard_id)

    gate = None
    if settings.auth.enabled and settings.llm.enabled:  # tenants are API keys' (and share a model)
        t = settings.tenants
        gate = TenantGate(
            settings.auth.tenant_policies(),
            max_inflight=t.max_inflight,
            max_waiting=t.max_waiting,
            metrics=TenantMetrics(metrics.registry),
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            node = await ShardNode.open(settings, metrics, spans, gate)
        except Exception as exc:
            write_termination_message(settings.termination_message_path, exc)
            spans.close()
            raise
        app.state.node, app.state.llm = node, node.llm
        try:
            yield
        finally:
            app.state.node = None
            await node.close()
            spans.close()

    app = FastAPI(
        title="Themis shard",
        version=__version__,
        lifespan=lifespan,
        description="A converged Themis shard: documents, vectors and LLM inference.",
        # The shard traces itself (``otel_sdk.py``: its own provider, W3C traceparent on every
        # hop). FastAPI's native OpenTelemetry would look up the global providers on every
        # request and, should anything set one, trace each request a second time.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.node = None
    app.state.llm = None
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(documents.router)
    app.include_router(transactions_api.router)
    app.include_router(search.router)
    app.include_router(cluster.router)
    app.include_router(backup.router)  # /v1/cluster/backups/...: this shard's part of a backup
    app.include_router(internal.router)
    app.include_router(channel.router)  # /internal/channel: peers' calls as frames on one socket
    app.include_router(aql.router)
    app.include_router(raid_api.router)
    engine = (
        inference.router,
        rag_api.router,  # POST /v1/rag
        adapters.router,
        openai_compat.router,
        batches.router,  # the OpenAI Batch API: /v1/files, /v1/batches
        kv_prefix.router,  # KV-prefix export/import between shards
        draft_api.router,  # /internal/draft: this shard as a speculative draft source
    )
    if settings.llm.enabled:
        app.state.kv_imports = kv_prefix.ImportGate(settings.llm.prefix_max_concurrent_imports)
        for router in engine:
            app.include_router(router)
    else:  # the same paths answer 503 llm_disabled by name, never 404 (docs/API.md "Inference")
        app.include_router(no_model.refusing_router(engine, settings.shard_id))
    app.add_middleware(HotDocumentPaths)  # innermost: the plain document PUT/GET without routing
    app.add_middleware(InternalAuth)  # /internal/... signed with the cluster secret (without mTLS)
    if gate is not None:  # a key's tenant: its limits and fair share
        app.add_middleware(TenantMiddleware, gate=gate, default_max_tokens=settings.llm.default_max_tokens)
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_request_bytes,
        path_limits={"/internal/kv_prefix/import": settings.llm.prefix_max_blob_bytes},
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(ListenerGuard, internal_port=settings.internal_port)
    if settings.auth.enabled and settings.internal_port is None:
        log.warning(
            "API keys are on but /internal routes share the public port (no TLS): shard-to-shard "
            "routes take no API key, so use TLS (themis up --tls) where the port is exposed"
        )
    base_openapi = app.openapi

    def openapi() -> dict:
        """FastAPI's schema with the statuses the shard really answers (and, with keys, security)."""
        if app.openapi_schema is None:
            schema = document_errors(base_openapi())
            rt = app.state.llm
            if rt is not None:
                dimension = rt.embedder.dimension if rt.embedder is not None else None
                schema = document_engine_limits(
                    schema,
                    max_tokens=settings.llm.max_tokens_limit,
                    embedding_dimension=dimension,
                    n_vocab=rt.model(None).native.n_vocab if rt.ready else None,
                )
            if settings.auth.enabled:
                schema = document_security(schema, metrics_open=settings.auth.metrics_open)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    if settings.auth.enabled:  # outermost: a request without a valid key goes no further
        app.add_middleware(
            AuthMiddleware,
            ring=settings.auth.key_ring(),
            metrics_open=settings.auth.metrics_open,
            docs_open=settings.auth.docs_open,
            realm=settings.auth.realm,
        )
    app.state.spans = spans  # the peer channel's direct handlers trace their requests too
    # outermost: times and traces everything below
    app.add_middleware(AccessLogMiddleware, spans=spans, settings=settings.access_log)
    return app
