"""In-process RAID clusters: one RaidService per shard, each behind the real ``api/raid.py`` router,
all reached through a real RemoteExecutor whose transport dispatches by host to the shard's ASGI app.
A "down" shard answers with a connection error, as a dead process would."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from themis_core.plan import ClusterSpec, Member, build_plan
from themis_shard.api import raid as raid_api
from themis_shard.api.errors import install_error_handlers
from themis_shard.cluster.placement.owners import Topology
from themis_shard.cluster.settings import ClusterSettings
from themis_shard.cluster.transport.remote import RemoteExecutor
from themis_shard.raid.service import RaidService
from themis_shard.raid.settings import RaidSettings
from themis_shard.raid.store import UnitStore


class Dispatch(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.apps: dict[str, httpx.ASGITransport] = {}
        self.down: set[str] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host in self.down or host not in self.apps:
            raise httpx.ConnectError("connection refused", request=request)
        return await self.apps[host].handle_async_request(request)


class RaidCluster:
    def __init__(self, root: Path, n: int, mode: str, **settings) -> None:
        self.root = root
        self.ids = [f"shard-{i}" for i in range(n)]
        members = tuple(Member(shard_id=s, url=f"http://{s}:80") for s in self.ids)
        self.plan = build_plan(ClusterSpec(name="t", members=members, raid_mode=mode))
        self.settings = RaidSettings(
            enabled=True,
            unit_size=settings.pop("unit_size", 64 << 10),
            startup_timeout_s=settings.pop("startup_timeout_s", 2),
            **settings,
        )
        self.transport = Dispatch()
        self.services: dict[str, RaidService] = {}
        self.executors: list[RemoteExecutor] = []
        for sid in self.ids:
            self.services[sid] = self._service(sid)

    def _service(self, sid: str) -> RaidService:
        topo = Topology.of(self.plan, sid)
        executor = RemoteExecutor(
            ClusterSettings(max_retries=0, breaker_failure_threshold=1000), topo.url, transport=self.transport
        )
        self.executors.append(executor)
        store = UnitStore(self.root / sid / "weights")
        service = RaidService(self.settings, sid, store, executor, lambda: topo, CollectorRegistry())
        app = FastAPI()
        install_error_handlers(app)
        app.include_router(raid_api.router)
        app.state.node = SimpleNamespace(raid=service, settings=SimpleNamespace(shard_id=sid))
        self.transport.apps[sid] = httpx.ASGITransport(app=app)
        return service

    def __getitem__(self, sid: str) -> RaidService:
        return self.services[sid]

    def replace(self, sid: str) -> RaidService:
        """A new process for ``sid`` on the same volume (or a wiped one)."""
        self.services[sid] = self._service(sid)
        return self.services[sid]

    def wipe(self, sid: str) -> None:
        self.services[sid].store.wipe()

    def unit_files(self, sid: str) -> dict[str, bytes]:
        units = self.root / sid / "weights" / "units"
        return {str(p.relative_to(units)): p.read_bytes() for p in sorted(units.rglob("*")) if p.is_file()}

    async def ingest_everywhere(self, source: Path):
        manifests = [await s.ingest_local(str(source)) for s in self.services.values()]
        for s, m in zip(self.services.values(), manifests, strict=True):
            s.store.set_active(m.key)
            await s.verify()
        for s in self.services.values():
            assert await s.check_formed()
        return manifests[0]

    async def close(self) -> None:
        for e in self.executors:
            await e.aclose()


@pytest_asyncio.fixture
async def raid_cluster(tmp_path):
    made: list[RaidCluster] = []

    def make(n: int = 4, mode: str = "raid5", **settings) -> RaidCluster:
        c = RaidCluster(tmp_path, n, mode, **settings)
        made.append(c)
        return c

    yield make
    for c in made:
        await c.close()


@pytest.fixture
def model_file(tmp_path) -> Path:
    """A GGUF stand-in: random bytes whose size divides into nothing (odd tail, padded stripe)."""
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + os.urandom(1_234_563))
    return path
