"""The shard node: the parts of one shard process, opened and closed together.

Everything a request handler needs hangs off one ``ShardNode`` on ``app.state.node`` — no
module-level state, so tests can run several shards in one process.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from .cluster.announcer import LoadSampler
from .cluster.service import ClusterService
from .cluster.settings import ClusterSettings
from .metrics import ShardMetrics
from .plan import ClusterPlan, single_shard_plan
from .settings import Settings
from .storage.documents import DocumentStore
from .vector.catalog import VectorCatalog
from .vector.index import gpu_count

log = logging.getLogger(__name__)


@dataclass
class ShardNode:
    settings: Settings
    metrics: ShardMetrics
    store: DocumentStore
    vectors: VectorCatalog
    plan: ClusterPlan
    cluster: ClusterService
    llm: Any = None
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, settings: Settings, metrics: ShardMetrics) -> ShardNode:
        data = settings.data_dir
        data.mkdir(parents=True, exist_ok=True)
        store = DocumentStore(data / "documents", max_document_bytes=settings.max_document_bytes)
        use_gpu = settings.use_gpu if settings.use_gpu is not None else gpu_count() > 0
        vectors = VectorCatalog(
            store, data / "vectors", use_gpu=use_gpu, persist_every=settings.vector_persist_every
        )
        plan = (
            ClusterPlan.load(settings.plan_path)
            if settings.plan_path and settings.plan_path.exists()
            else single_shard_plan(settings.shard_id, settings.url)
        )
        tls = (
            {
                "tls_ca_path": settings.tls_ca_path,
                "tls_cert_path": settings.tls_cert_path,
                "tls_key_path": settings.tls_key_path,
            }
            if settings.tls
            else {}
        )
        cluster = ClusterService(
            plan,
            settings.shard_id,
            store,
            vectors,
            ClusterSettings(**tls),
            metrics.registry,
            load=LoadSampler(metrics.registry).sample,
            plan_path=settings.plan_path,
        )
        node = cls(
            settings=settings, metrics=metrics, store=store, vectors=vectors, plan=plan, cluster=cluster
        )
        for config in store.collections():
            metrics.documents.labels(collection=config.name).set(store.count(config.name))
            metrics.vectors.labels(collection=config.name).set(vectors.size(config.name))
        log.info(
            "shard %s open at %s (ring version %d, gpu=%s)",
            settings.shard_id,
            data,
            plan.ring_version,
            use_gpu,
        )
        return node

    def close(self) -> None:
        self.vectors.close()
        self.store.close()

    @property
    def ready(self) -> bool:
        llm_ready = self.llm is None or bool(getattr(self.llm, "ready", False))
        return llm_ready and self.cluster.caught_up
