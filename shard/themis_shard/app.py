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
from starlette.concurrency import run_in_threadpool

from . import __version__
from .api import aql, cluster, documents, health, internal, search
from .api import raid as raid_api  # RAID weight storage (issue 8)
from .api.middleware import BodyLimitMiddleware, ListenerGuard, MetricsMiddleware
from .errors import install_error_handlers
from .metrics import ShardMetrics
from .node import ShardNode
from .raid.service import start_raid  # RAID weight storage (issue 8)
from .settings import Settings

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = ShardMetrics(settings.shard_id)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        node = await run_in_threadpool(ShardNode.open, settings, metrics)
        # RAID weight storage (issue 8): units repaired, model assembled + sha256-verified before the engine.
        node.raid, raid_model = await start_raid(node, settings.llm.model_path, assemble=settings.llm.enabled)
        if raid_model is not None:
            settings.llm.model_path = str(raid_model)
        if settings.llm.enabled:
            from .llm.runtime import LLMRuntime

            node.llm = LLMRuntime(
                settings.llm,
                metrics.registry,
                prefix_puller=node.cluster.prefix_puller(settings.llm),  # KV prefixes from peers
                draft_resolver=node.cluster.draft_target,  # the draft shard
            )
            app.state.llm = node.llm
            await node.llm.start()
            node.cluster.runtime = node.llm  # adapters to announce through gossip
        await node.cluster.start()
        app.state.node = node
        try:
            yield
        finally:
            app.state.node = None
            if node.raid is not None:  # RAID (issue 8)
                await node.raid.stop()
            await node.cluster.stop()
            if node.llm is not None:
                await node.llm.stop()
            await run_in_threadpool(node.close)

    app = FastAPI(
        title="Themis shard",
        version=__version__,
        lifespan=lifespan,
        description="A converged Themis shard: documents, vectors and LLM inference.",
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.node = None
    app.state.llm = None
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(documents.router)
    app.include_router(search.router)
    app.include_router(cluster.router)
    app.include_router(internal.router)
    app.include_router(aql.router)
    app.include_router(raid_api.router)  # RAID weight storage
    if settings.llm.enabled:
        from .api import adapters, inference, openai_compat

        app.include_router(inference.router)
        app.include_router(adapters.router)
        app.include_router(openai_compat.router)
        from .api import kv_prefix

        app.include_router(kv_prefix.router)  # KV-prefix export/import between shards
        from .api import draft as draft_api

        app.include_router(draft_api.router)  # /internal/draft: speculative draft shard
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_request_bytes,
        path_limits={"/internal/kv_prefix/import": settings.llm.prefix_max_blob_bytes},
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(ListenerGuard, internal_port=settings.internal_port)
    return app
