"""The shard node: the composition root of one shard process.

``ShardNode.open`` builds every part with its collaborators as constructor arguments — storage,
vectors, the cluster service, RAID weight storage, the inference runtime, AQL — starts them in
dependency order and returns the whole node; ``close`` stops them in reverse. Handlers reach the
parts through the one ``ShardNode`` on ``app.state.node``: no module-level state, so tests can
run several shards in one process.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from themis_core.plan import ClusterPlan, single_shard_plan
from themis_core.tracing import NoSpans, Spans

from .aql.service import AqlService
from .backup.restore import restore_on_start
from .batches.dispatch import LineDispatcher
from .batches.runner import BatchRunner
from .batches.service import BatchService
from .batches.store import BATCHES, BatchStore
from .cluster.membership.announcer import LoadSampler
from .cluster.replication.fencing import primary
from .cluster.service import ClusterService
from .cluster.settings import ClusterSettings
from .cluster.transactions.settings import TxnSettings
from .documents.service import DocumentService
from .domains.detector import DomainDetector
from .domains.sets import adapter_validation_set
from .errors import Unavailable, llm_disabled
from .inference.caller_gateway import CallerGateway
from .inference.service import InferenceService
from .llm.fetch import FetchSettings, SourceFetcher, fetch_llm_sources
from .metrics import ShardMetrics, StoreSizes
from .rag.service import RagService
from .raid.service import RaidService, start_raid
from .settings import Settings
from .storage.documents import DocumentStore
from .storage.formats import open_formats
from .tenants.gate import TenantGate
from .training.federation import Federation, LocalParticipant
from .training.persisted import TrainedAdapters
from .training.service import TrainingService, train_cache_dir
from .vector.catalog import VectorCatalog
from .vector.index import gpu_count

if TYPE_CHECKING:  # llama.cpp is imported only when inference is enabled
    from .llm.host_cores import HostCores
    from .llm.runtime import LLMRuntime

log = logging.getLogger(__name__)


@dataclass
class ShardNode:
    settings: Settings
    metrics: ShardMetrics
    store: DocumentStore
    vectors: VectorCatalog
    plan: ClusterPlan
    cluster: ClusterService
    raid: RaidService | None = None
    llm: LLMRuntime | None = None
    #: Downloads http(s) model and adapter sources onto the weights volume.
    fetcher: SourceFetcher | None = None
    #: Tenants' admission (API keys and a model on): the HTTP edge's, shared with AQL's inference.
    tenant_gate: TenantGate | None = None
    #: This machine's cores, shared with the engines of the shards beside this one (``themis up``).
    host_cores: HostCores | None = None
    # The services over those parts, built once by ``__post_init__`` (never per request).
    documents: DocumentService = field(init=False)
    domains: DomainDetector = field(init=False)
    inference: InferenceService = field(init=False)
    rag: RagService = field(init=False)
    batch_store: BatchStore = field(init=False)
    batch_runner: BatchRunner = field(init=False)
    batches: BatchService = field(init=False)
    training: TrainingService = field(init=False)
    federation: Federation = field(init=False)
    aql: AqlService = field(init=False)

    def __post_init__(self) -> None:
        """Wire every service once, in dependency order, each with its collaborators as
        constructor arguments; the engine is looked up when used (it may still be loading)."""
        settings = self.settings
        #: Documents with embed-on-write (through this shard's embedding model, when it has one).
        self.documents = DocumentService(self.store, self.cluster.documents, self.llm)
        #: Domain detection for requests that name none (over this shard's embedding model).
        self.domains = DomainDetector(
            settings.domains, lambda: self.llm.embedder if self.llm else None, self.metrics.registry
        )
        #: The one inference pipeline: REST, OpenAI routes, RAG and the Batch API's lines.
        self.inference = InferenceService(
            runtime=self.ready_runtime,
            routing=lambda: self.cluster.inference,
            documents=lambda: self.documents,
            shard_id=settings.shard_id,
            domains=lambda: self.domains,
        )
        #: AQL's INFER/EMBED/RAG go through the same pipeline, rules and tenant gate, in process.
        self.aql = AqlService(
            self,
            CallerGateway(
                self.inference,
                self.tenant_gate,
                keys_on=settings.auth.enabled,
                default_max_tokens=settings.llm.default_max_tokens,
                max_batch_requests=settings.max_batch_requests,
                metrics_open=settings.auth.metrics_open,
            ),
        )
        #: Retrieval for ``/v1/rag`` (the question needs this shard's embedding model).
        self.rag = RagService(
            self.store,
            self.vectors,
            self.cluster,
            self.metrics,
            lambda texts: self.ready_runtime().embed(texts),
            passage_chars=self.aql.settings.rag_context_chars,
            speculative=self.aql.settings.rag_speculative,
        )

        async def query(text: str, binds: dict) -> list[dict]:
            return (await self.aql.execute(text, binds))["result"]

        self.batch_store = BatchStore(self.documents.commit, self.cluster.documents.get, query)

        def owns(batch_id: str) -> bool:
            topo = self.cluster.topology
            return topo.in_sync_self and primary(topo, BATCHES, batch_id) == topo.self_id

        #: Runs the batches this shard coordinates (the primary of their document).
        self.batch_runner = BatchRunner(
            self.batch_store,
            self.store,
            LineDispatcher(self.inference, lambda: self.cluster.inference, settings.shard_id),
            settings.batches,
            owns=owns,
            ready=lambda: self.llm is not None and self.llm.ready and self.cluster.caught_up,
        )
        #: The OpenAI Batch API (``/v1/files``, ``/v1/batches``).
        self.batches = BatchService(self.batch_store, self.batch_runner, settings.batches)
        #: LoRA training on this shard's documents (``POST /v1/adapters:train``).
        self.training = TrainingService(
            self.store,
            self.ready_runtime,
            settings.weights_path / "trained",
            train_cache_dir(settings.llm),
        )
        #: Federated LoRA rounds started here (this shard aggregates) over the remote executor.
        self.federation = Federation(
            LocalParticipant(
                settings.shard_id, self.training, lambda: self.ready_runtime().model(None).adapters
            ),
            lambda: self.cluster.topology.members,
            self.cluster.executor,
        )

    def ready_runtime(self) -> LLMRuntime:
        """The loaded engine, or 503: ``llm_disabled`` on a shard that runs none, ``llm_not_ready``
        while it loads."""
        if self.llm is None and not self.settings.llm.enabled:
            raise llm_disabled(self.settings.shard_id)
        if self.llm is None or not self.llm.ready:
            raise Unavailable("the model is still loading", code="llm_not_ready")
        return self.llm

    @classmethod
    async def open(
        cls,
        settings: Settings,
        metrics: ShardMetrics,
        spans: Spans | None = None,
        tenant_gate: TenantGate | None = None,
    ) -> ShardNode:
        """Build and start every part; a part that fails to start stops the ones before it.
        ``spans``: where request and peer-call spans go (the app's, shared with its access log);
        ``tenant_gate``: the HTTP edge's tenant admission, which AQL's inference shares."""
        fetcher = SourceFetcher(settings.weights_path / "sources", FetchSettings())
        store, vectors, plan, cluster = await asyncio.to_thread(
            cls._open_storage, settings, metrics, fetcher, spans or NoSpans()
        )
        raid: RaidService | None = None
        llm: LLMRuntime | None = None
        cores = None  # this host's cores, shared with the shards beside this one (``themis up``)
        try:
            # RAID weights first: units repaired, the model assembled and sha256-verified before the engine.
            raid, raid_model = await start_raid(
                settings.data_dir,
                settings.shard_id,
                cluster,
                metrics.registry,
                settings.llm.model_path,
                assemble=settings.llm.enabled,
                use_gpu=settings.use_gpu,
            )
            if settings.llm.enabled:
                from .llm import host_cores
                from .llm.runtime import LLMRuntime  # llama.cpp loads only when inference is on

                llm_settings = settings.llm
                if raid_model is not None:
                    llm_settings = llm_settings.model_copy(update={"model_path": str(raid_model)})
                # http(s) sources onto the weights volume; every *_sha256 checked
                llm_settings = await fetch_llm_sources(llm_settings, fetcher)
                # cores shared by demand with the other shards of this host (``themis up``)
                cores = host_cores.open_for(
                    llm_settings.host_cores, llm_settings.host_cores_file, settings.shard_id
                )
                llm = LLMRuntime(
                    llm_settings,
                    metrics.registry,
                    prefix_puller=cluster.prefix_puller,  # KV prefixes from peers
                    draft_resolver=cluster.draft_target,  # the draft shard
                    validation_sets=adapter_validation_set,  # each adapter's held-out set
                    cores=cores,
                )
                await llm.start()
                # Trained and federated adapters, before gossip announces this shard's adapters.
                await TrainedAdapters(settings.weights_path / "trained").reload(llm.model(None).adapters)
            # adapters to announce through gossip; the engines this host's cores batch best on
            await cluster.start(llm, colocated=cores.shards if cores is not None else None)
        except BaseException:
            if llm is not None:
                await llm.stop()
            if cores is not None:
                cores.close()
            if raid is not None:
                await raid.stop()
            await cluster.stop()
            await asyncio.to_thread(cls._close_storage, vectors, store)
            raise
        node = cls(
            settings=settings,
            metrics=metrics,
            store=store,
            vectors=vectors,
            plan=plan,
            cluster=cluster,
            raid=raid,
            llm=llm,
            fetcher=fetcher,
            tenant_gate=tenant_gate,
            host_cores=cores,
        )
        if llm is not None:  # batches this shard coordinates, resumed after a restart too
            node.batch_runner.start()
        return node

    @staticmethod
    def _open_storage(
        settings: Settings, metrics: ShardMetrics, fetcher: SourceFetcher, spans: Spans
    ) -> tuple[DocumentStore, VectorCatalog, ClusterPlan, ClusterService]:
        data = settings.data_dir
        data.mkdir(parents=True, exist_ok=True)
        plan = (
            ClusterPlan.load(settings.plan_path)
            if settings.plan_path and settings.plan_path.exists()
            else single_shard_plan(settings.shard_id, settings.url)
        )

        def open_store(path: Path) -> DocumentStore:
            return DocumentStore(
                path,
                max_document_bytes=settings.max_document_bytes,
                origin=settings.shard_id,
                max_document_depth=settings.max_document_depth,
                history_versions=settings.document_history_versions,
            )

        if settings.restore_from:  # a new cluster's first start: this shard's part of a backup
            trained = settings.weights_path / "trained"
            shard_id = settings.shard_id
            restored = restore_on_start(settings.restore_from, data, plan, shard_id, open_store, trained)
            if restored is not None:
                log.info("restored %s: %s", settings.restore_from, restored)
        store = open_store(data / "documents")
        try:  # before anything reads or writes it: newer data stops the shard, older moves forward
            open_formats(store)
        except BaseException:
            store.close()
            raise
        metrics.storage_writable.set_function(lambda: float(store.health.writable))
        use_gpu = settings.use_gpu if settings.use_gpu is not None else gpu_count() > 0
        vectors = VectorCatalog(
            store, data / "vectors", use_gpu=use_gpu, persist_every=settings.vector_persist_every
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
            prefix=settings.llm if settings.llm.enabled else None,
            fetcher=fetcher,
            txn=TxnSettings(),
            spans=spans,
        )
        metrics.registry.register(
            StoreSizes(lambda: [c.name for c in store.collections()], store.count, vectors.size)
        )
        log.info(
            "shard %s open at %s (ring version %d, gpu=%s)",
            settings.shard_id,
            data,
            plan.ring_version,
            use_gpu,
        )
        return store, vectors, plan, cluster

    @staticmethod
    def _close_storage(vectors: VectorCatalog, store: DocumentStore) -> None:
        vectors.close()  # persists the indexes with the store generation they reflect
        store.close()

    async def close(self) -> None:
        await self.batch_runner.stop()  # started only with an engine; stopping an idle one is a no-op
        if self.raid is not None:
            await self.raid.stop()
        await self.cluster.stop()
        if self.llm is not None:
            await self.llm.stop()
        if self.host_cores is not None:  # the host's other shards no longer count this engine
            self.host_cores.close()
        await asyncio.to_thread(self._close_storage, self.vectors, self.store)

    @property
    def ready(self) -> bool:
        """Serving: the engine loaded, caught up with the cluster, and the disk takes writes
        (probed again here, at most once a second, while it did not)."""
        writable = self.store.health.probe()
        return (self.llm is None or self.llm.ready) and self.cluster.caught_up and writable
