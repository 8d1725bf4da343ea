"""Reading the documents an answer cites at the versions it cited, or as they stood at one hybrid
time: from this shard's store when it holds the key, else from an owner's
``/internal/history/{collection}/{key}`` (the owners in ring order, the ones believed down last).

A 404/410 of one owner is answered only when no other owner holds the version (a replica may
keep more history than the primary); no owner answering at all is a 503 that names the source.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from ..cluster.documents.coordinator import relay
from ..cluster.placement.owners import candidates
from ..cluster.service import ClusterService
from ..cluster.transport.remote import PeerError, PeerUnavailable, internal_path
from ..errors import ThemisError, Unavailable
from ..storage import history
from ..storage.documents import DocumentStore
from ..storage.names import urn

#: A read of one key's held records: (store, collection, key) → the record as JSON, or None.
LocalRead = Callable[[DocumentStore, str, str], dict[str, Any] | None]


def record_json(record: Any) -> dict[str, Any] | None:
    if record is None:
        return None
    return {"version": record.version, "hlc": record.hlc, "document": record.document}


def read_version(store: DocumentStore, collection: str, key: str, version: int, hlc: int | None) -> dict:
    """This store's record of ``collection/key`` at ``version`` (404/410 by name: ``history``)."""
    records = store.versions_of(collection, key)
    return record_json(history.at_version(records, urn(collection, key), version, hlc))


def read_as_of(store: DocumentStore, collection: str, key: str, hlc: int) -> dict[str, Any] | None:
    """This store's record of ``collection/key`` as it stood at ``hlc`` (None: absent then)."""
    return record_json(history.as_of(store.versions_of(collection, key), urn(collection, key), hlc))


class SourceReader:
    def __init__(self, store: DocumentStore, cluster: ClusterService) -> None:
        self.store = store
        self.cluster = cluster

    async def at_version(self, collection: str, key: str, version: int, hlc: int | None) -> dict:
        """``{"version", "hlc", "document"}`` of the key at ``version``."""
        params: dict[str, Any] = {"version": version}
        if hlc is not None:
            params["hlc"] = hlc
        return await self._read(
            collection, key, lambda: read_version(self.store, collection, key, version, hlc), params
        )

    async def as_of(self, collection: str, key: str, hlc: int) -> dict[str, Any] | None:
        """The key's record as it stood at ``hlc`` (None: it did not exist then)."""
        return await self._read(
            collection, key, lambda: read_as_of(self.store, collection, key, hlc), {"as_of": hlc}
        )

    async def _read(self, collection: str, key: str, local: Callable[[], Any], params: dict) -> Any:
        topo = self.cluster.topology
        if not topo.clustered:
            return await run_in_threadpool(local)
        refusal: ThemisError | None = None
        for owner in candidates(topo.owners(collection, key), self.cluster.membership.unavailable()):
            try:
                if owner == topo.self_id:
                    return await run_in_threadpool(local)
                reply = await self.cluster.executor.request(
                    owner,
                    "GET",
                    internal_path("history", collection, key),
                    params=params,
                    retries=0,
                    timeout_s=5,
                )
                return reply.get("record")
            except ThemisError as exc:
                refusal = exc
            except PeerError as exc:
                refusal = relay(exc)
            except PeerUnavailable:
                continue
        if refusal is not None:
            raise refusal
        raise Unavailable(f"no owner of {urn(collection, key)} answered", code="sources_unavailable")
