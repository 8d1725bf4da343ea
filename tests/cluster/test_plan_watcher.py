"""Spec: the plan watcher — a changed plan file swaps topology and router settings for every
part, reseeds membership and starts a handoff only when the ring moved; a bad file is ignored.
The adapters the plan places on this shard are loaded (and checked), the others unloaded."""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import CollectorRegistry
from themis_core.plan import AdapterPlacement
from themis_shard.cluster.plan_watcher import (
    PlanWatcher,
    adapter_path,
    adapters_to_load,
    adapters_to_unload,
    placed_here,
)
from themis_shard.llm.fetch import FetchSettings, SourceFetcher

from .fakes import live, plan_of

SHA_A = "a" * 64


@dataclass
class Recorder:
    """Router, membership and handoff as the watcher sees them."""

    policies: list = field(default_factory=list)
    plans: list = field(default_factory=list)
    begun: int = 0

    def set_policy(self, policy) -> None:
        self.policies.append(policy)

    def adopt_plan(self, plan) -> None:
        self.plans.append(plan)

    def begin(self) -> None:
        self.begun += 1


def watcher(path, plan, runtime=None):
    current = live(plan)
    rec = Recorder()
    slot = SimpleNamespace(runtime=runtime)
    w = PlanWatcher("s-0", path, current, rec, rec, rec, slot, CollectorRegistry())
    return w, current, rec


def write(path, plan, bump: int = 1) -> None:
    path.write_text(plan.to_json())
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 1_000_000_000))


def test_an_untouched_plan_file_changes_nothing(tmp_path) -> None:
    path = tmp_path / "plan.json"
    plan = plan_of(2)
    path.write_text(plan.to_json())
    w, current, rec = watcher(path, plan)
    assert not w.reload_plan()
    write(path, plan)  # rewritten with the same content
    assert not w.reload_plan()
    assert rec == Recorder() and current.topology.plan == plan


def test_new_router_settings_reach_the_live_plan_and_the_router_without_a_handoff(tmp_path) -> None:
    path = tmp_path / "plan.json"
    first = plan_of(2)
    path.write_text(first.to_json())
    w, current, rec = watcher(path, first)
    second = plan_of(2, previous=first, router={"gamma": 0.3, "announcement_ttl_s": 60})
    write(path, second)
    assert w.reload_plan()
    assert current.topology.plan == second and current.topology.version == 1
    assert (current.settings.gamma, current.settings.announcement_ttl_s) == (0.3, 60)
    assert len(rec.policies) == 1 and rec.plans == [second] and rec.begun == 0


def test_a_moved_ring_starts_one_handoff_and_reseeds_membership(tmp_path) -> None:
    path = tmp_path / "plan.json"
    first = plan_of(2)
    path.write_text(first.to_json())
    w, current, rec = watcher(path, first)
    grown = plan_of(3, previous=first)
    write(path, grown)
    assert w.reload_plan()
    assert current.topology.version == 2 and "s-2" in current.topology.members
    assert rec.begun == 1 and rec.plans == [grown]
    assert w.ring_version._value.get() == 2


def test_a_half_written_plan_is_ignored_and_the_old_one_kept(tmp_path) -> None:
    path = tmp_path / "plan.json"
    plan = plan_of(2)
    path.write_text(plan.to_json())
    w, current, rec = watcher(path, plan)
    path.write_text(plan.to_json()[:40])
    os.utime(path, ns=(0, path.stat().st_mtime_ns + 1_000_000_000))
    assert not w.reload_plan()
    assert current.topology.plan == plan and rec == Recorder()


def test_without_a_plan_file_there_is_nothing_to_watch(tmp_path) -> None:
    w, _, _ = watcher(None, plan_of(1, "raid0"))
    assert not w.reload_plan()


# -- adapter placement -----------------------------------------------------------------------------
class Manager:
    """The engine's adapter manager: a load fails for a missing file, sha256 is per name."""

    def __init__(self, sha: dict[str, str]) -> None:
        self.sha = sha
        self.loaded: dict[str, str] = {}
        self.calls: list[tuple[str, str]] = []

    def list(self):
        return [SimpleNamespace(name=n) for n in self.loaded]

    async def load(self, name, source, *, domain, scale):
        self.calls.append(("load", name))
        if not source.startswith("/adapters/"):
            raise FileNotFoundError(source)
        self.loaded[name] = source
        return SimpleNamespace(name=name, sha256=self.sha.get(name, SHA_A))

    async def unload(self, name):
        self.calls.append(("unload", name))
        self.loaded.pop(name, None)


def runtime_with(manager: Manager, ready: bool = True):
    return SimpleNamespace(ready=ready, model=lambda _: SimpleNamespace(adapters=manager))


def placement(name: str, source: str, shards=("s-0",), sha256=None) -> AdapterPlacement:
    return AdapterPlacement(name=name, domain=name, source=source, shards=shards, sha256=sha256)


def test_adapters_placed_here_are_loaded_checked_and_failures_reported_once(tmp_path) -> None:
    adapters = (
        placement("legal", "file:///adapters/legal.gguf", sha256=SHA_A),
        placement("med", "/adapters/med.gguf", sha256=SHA_A),  # the file hashes differently
        placement("web", "https://example.com/web.gguf"),
        placement("gone", "/missing/gone.gguf"),
        placement("elsewhere", "/adapters/x.gguf", shards=("s-1",)),
    )
    manager = Manager({"med": "b" * 64})
    w, _, _ = watcher(None, plan_of(2, adapters=adapters), runtime_with(manager))
    asyncio.run(w.sync_adapters())
    report = w.adapter_report()
    assert report["loaded"] == ["legal"] and set(manager.loaded) == {"legal"}
    assert report["failed"]["med"] == f"sha256 mismatch: expected {SHA_A}, got {'b' * 64}"
    assert "needs a fetcher" in report["failed"]["web"]  # this watcher was built without one
    assert "gone" in report["failed"]
    calls = len(manager.calls)
    asyncio.run(w.sync_adapters())  # failures wait for a new plan; nothing is retried
    assert len(manager.calls) == calls


def test_an_adapter_no_longer_placed_here_is_unloaded_and_a_new_plan_retries_failures(tmp_path) -> None:
    path = tmp_path / "plan.json"
    first = plan_of(2, adapters=(placement("legal", "/adapters/legal.gguf"), placement("bad", "/x/bad")))
    path.write_text(first.to_json())
    manager = Manager({})
    manager.loaded["by-hand"] = "/adapters/by-hand.gguf"
    w, _, _ = watcher(path, first, runtime_with(manager))
    asyncio.run(w.sync_adapters())
    write(path, plan_of(2, previous=first, adapters=(placement("bad", "/x/bad"),)))
    assert w.reload_plan()
    asyncio.run(w.sync_adapters())
    assert set(manager.loaded) == {"by-hand"}  # loaded by hand: not the plan's to unload
    assert manager.calls.count(("load", "bad")) == 2
    assert w.adapter_report()["loaded"] == []


def test_nothing_is_loaded_before_the_engine_is_ready() -> None:
    manager = Manager({})
    w, _, _ = watcher(
        None, plan_of(2, adapters=(placement("a", "/adapters/a"),)), runtime_with(manager, False)
    )
    asyncio.run(w.sync_adapters())
    w2, _, _ = watcher(None, plan_of(2, adapters=(placement("a", "/adapters/a"),)))
    asyncio.run(w2.sync_adapters())
    assert manager.calls == []


def test_the_pure_placement_decisions() -> None:
    wanted = placed_here([placement("a", "/a"), placement("b", "/b", shards=("s-1",))], "s-0")
    assert list(wanted) == ["a"]
    assert [p.name for p in adapters_to_load(wanted, loaded=[], failed=[])] == ["a"]
    assert adapters_to_load(wanted, loaded=["a"], failed=[]) == []
    assert adapters_to_load(wanted, loaded=[], failed=["a"]) == []
    assert adapters_to_unload(["a", "old", "unloaded"], wanted, loaded=["a", "old"]) == ["old"]
    assert adapter_path("file:///m/a.gguf") == "/m/a.gguf"
    assert adapter_path("/m/a.gguf") == "/m/a.gguf"
    assert adapter_path("s3://bucket/a.gguf") is None


def test_a_plan_with_a_lower_ring_version_for_the_same_cluster_uid_is_refused(tmp_path) -> None:
    path = tmp_path / "plan.json"
    one = plan_of(2, cluster_uid="uid-1")
    two = plan_of(3, previous=one, cluster_uid="uid-1")
    path.write_text(two.to_json())
    w, current, rec = watcher(path, two)
    stale = plan_of(2, cluster_uid="uid-1")  # an operator that lost its state starts at 1 again
    write(path, stale)
    assert not w.reload_plan()
    assert current.topology.plan == two and rec.plans == [] and rec.begun == 0
    other = plan_of(2, cluster_uid="uid-2")  # a recreated cluster (new uid) starts afresh
    write(path, other, bump=2)
    assert w.reload_plan() and current.topology.plan == other


def test_http_adapter_sources_are_fetched_onto_the_weights_volume_and_checked(tmp_path, file_server) -> None:
    good, bad = b"GGUF legal adapter", b"GGUF other bytes"
    file_server.files |= {"/legal.gguf": good, "/med.gguf": bad}
    sha_good = hashlib.sha256(good).hexdigest()
    adapters = (
        placement("legal", f"{file_server.url}/legal.gguf", sha256=sha_good),
        placement("med", f"{file_server.url}/med.gguf", sha256=sha_good),  # wrong digest
    )
    loaded: dict[str, str] = {}

    class Files(Manager):
        async def load(self, name, source, *, domain, scale):
            loaded[name] = source
            return SimpleNamespace(name=name, sha256=hashlib.sha256(Path(source).read_bytes()).hexdigest())

    manager = Files({})
    fetcher = SourceFetcher(tmp_path / "weights", FetchSettings(retries=0))
    current = live(plan_of(2, adapters=adapters))
    slot = SimpleNamespace(runtime=runtime_with(manager))
    rec = Recorder()
    w = PlanWatcher("s-0", None, current, rec, rec, rec, slot, CollectorRegistry(), fetcher=fetcher)
    asyncio.run(w.sync_adapters())
    report = w.adapter_report()
    assert report["loaded"] == ["legal"] and Path(loaded["legal"]).read_bytes() == good
    assert Path(loaded["legal"]).is_relative_to(tmp_path / "weights")
    assert report["failed"]["med"].startswith("sha256 mismatch for adapter")
    assert "med" not in loaded  # refused before llama.cpp saw it


# -- plans the authority sends with its probe ------------------------------------------------------
def with_uid(plan, uid: str = "uid-1"):
    return plan.model_copy(update={"cluster_uid": uid})


def test_a_newer_epoch_sent_by_the_authority_is_adopted_and_the_lagging_file_cannot_undo_it(tmp_path) -> None:
    """A mounted ConfigMap can lag the authority by a minute: the probe brings the new epoch,
    and the file's older plan, when the kubelet renders it, is refused as a rollback."""
    from themis_core.plan import FailoverSettings, with_in_sync

    path = tmp_path / "plan.json"
    first = with_uid(plan_of(3, "raid1", failover=FailoverSettings()))
    path.write_text(first.to_json())
    w, current, _ = watcher(path, first)
    fenced = with_in_sync(first, ("s-1",), ())
    assert w.adopt_pushed(fenced)
    assert current.topology.plan == fenced and current.topology.epoch == first.plan_epoch + 1
    write(path, first)  # the kubelet renders an older version
    assert not w.reload_plan() and current.topology.plan == fenced
    write(path, fenced)  # and catches up
    assert not w.reload_plan() and current.topology.plan == fenced


def test_a_sent_plan_of_another_cluster_an_older_epoch_or_another_ring_is_refused(tmp_path) -> None:
    from themis_core.plan import FailoverSettings, with_in_sync

    path = tmp_path / "plan.json"
    first = with_uid(plan_of(3, "raid1", failover=FailoverSettings()))
    path.write_text(first.to_json())
    w, current, _ = watcher(path, first)
    assert not w.adopt_pushed(with_uid(with_in_sync(first, ("s-1",), ()), "other-uid"))
    assert not w.adopt_pushed(first)  # not newer
    resharded = with_uid(plan_of(4, "raid1", previous=first, failover=FailoverSettings()))
    assert not w.adopt_pushed(resharded)  # a ring change comes with a handoff: the file brings it
    assert current.topology.plan == first


def test_adopting_a_plan_wakes_whoever_waits_for_a_change(tmp_path) -> None:
    """A write waiting on an owner stops waiting once a new plan fences that owner."""
    from themis_core.plan import FailoverSettings, with_in_sync

    first = with_uid(plan_of(3, "raid1", failover=FailoverSettings()))
    w, current, _ = watcher(None, first)

    async def wait_then_adopt() -> bool:
        waiter = current.next_change()
        await asyncio.sleep(0)
        assert not waiter.done()
        w.adopt_pushed(with_in_sync(first, ("s-1",), ()))
        await asyncio.wait_for(waiter, 1.0)
        return current.topology.plan.out_of_sync == ("s-1",)

    assert asyncio.run(wait_then_adopt())


def test_an_in_sync_watch_fires_once_a_plan_fences_its_peer_and_not_before_nor_after_stop(tmp_path) -> None:
    """A write waiting on an owner watches it: a plan that keeps the owner in sync re-arms the
    watch, a plan that fences it fires the watch once, and a stopped watch never fires."""
    from themis_core.plan import FailoverSettings, with_in_sync
    from themis_shard.cluster.placement.views import InSyncWatch

    first = with_uid(plan_of(3, "raid1", failover=FailoverSettings()))
    w, current, _ = watcher(None, first)

    async def scenario() -> tuple[list[str], list[str]]:
        fired: list[str] = []
        stopped: list[str] = []
        InSyncWatch(current, "s-1", lambda: fired.append("s-1"))
        InSyncWatch(current, "s-1", lambda: stopped.append("s-1")).stop()
        second = with_in_sync(first, ("s-2",), ())  # s-1 stays in sync
        w.adopt_pushed(second)
        await asyncio.sleep(0.01)
        assert fired == []
        w.adopt_pushed(with_in_sync(second, ("s-1",), ("s-2",)))  # s-2 rejoins, s-1 is fenced
        await asyncio.sleep(0.01)
        return fired, stopped

    assert asyncio.run(scenario()) == (["s-1"], [])
