"""Spec: the cluster service façade — it composes the parts, and what one part changes (the
plan, the engine, the engines sharing this machine) every other part sees; starting and
stopping leaves no task behind."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

from prometheus_client import CollectorRegistry
from themis_shard.cluster.service import ClusterService
from themis_shard.cluster.settings import ClusterSettings
from themis_shard.llm.settings import LLMSettings
from themis_shard.vector.catalog import VectorCatalog

from .fakes import plan_of


def service(tmp_path, store, plan, plan_path=None, prefix=None) -> ClusterService:
    vectors = VectorCatalog(store, tmp_path / "vectors", use_gpu=False)
    return ClusterService(
        plan,
        "s-0",
        store,
        vectors,
        ClusterSettings(),
        CollectorRegistry(),
        plan_path=plan_path,
        prefix=prefix,
    )


def test_a_reloaded_plan_is_what_every_part_sees(tmp_path, store) -> None:
    path = tmp_path / "plan.json"
    first = plan_of(1, "raid0")
    path.write_text(first.to_json())
    cluster = service(tmp_path, store, first, path)
    assert cluster.caught_up and not cluster.handoff_active
    grown = plan_of(2, previous=first, router={"gamma": 0.5})
    path.write_text(grown.to_json())
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000_000))

    async def go() -> None:
        assert cluster.reload_plan()
        await cluster.handoff.stop()  # the handoff it started would call the (fake) new peer
        await cluster.executor.aclose()

    asyncio.run(go())
    assert cluster.topology.version == 2
    assert cluster.documents.topology is cluster.topology
    assert cluster.settings.gamma == 0.5
    assert set(cluster.state.members) == {"s-0", "s-1"}
    assert cluster.handoff_active and cluster.previous_ring() is not None


def test_the_engine_given_at_start_reaches_membership_and_the_plan_watcher(tmp_path, store) -> None:
    cluster = service(tmp_path, store, plan_of(2))
    engine = SimpleNamespace(settings=SimpleNamespace(draft_shard="s-1"), ready=False, models={})

    async def go() -> None:
        await cluster.start(engine)
        try:
            assert cluster.runtime is engine
            assert cluster.draft_target().peer == "s-1"
            assert cluster.plan_adapters() == {"loaded": [], "failed": {}}
        finally:
            await cluster.stop()

    asyncio.run(go())


def test_start_and_stop_leave_no_background_task(tmp_path, store) -> None:
    cluster = service(tmp_path, store, plan_of(1, "raid0"), tmp_path / "missing-plan.json")

    async def go() -> set[str]:
        await cluster.start()
        await asyncio.sleep(0.05)
        names = {t.get_name() for t in asyncio.all_tasks()}
        await cluster.stop()
        left = {t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()}
        assert not left, left
        return names

    assert {"hint-replay", "plan-adapters", "plan-watch", "breaker-probe"} <= asyncio.run(go())
    assert cluster.caught_up


def test_a_request_without_a_domain_joins_the_batch_of_the_engines_sharing_this_machine(
    tmp_path, store
) -> None:
    """The engines given at start as sharing this machine's cores (slot order: s-1 first) take
    a request that lands here, unless host batching is off; then it runs where it landed."""

    def placed(host_batching: bool, where: str) -> str | None:
        prefix = LLMSettings(prefix_cache=False, host_batching=host_batching)
        cluster = service(tmp_path / where, store, plan_of(2), prefix=prefix)

        async def go() -> str | None:
            await cluster.start(None, colocated=lambda: ["s-1", "s-0"])
            try:
                return cluster.inference.prefix_holder("a prompt")
            finally:
                await cluster.stop()

        return asyncio.run(go())

    assert placed(True, "on") == "s-1"
    assert placed(False, "off") is None
