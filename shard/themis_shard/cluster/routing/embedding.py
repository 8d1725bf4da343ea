"""Data-local EMBED (paper §IV-E): each document is embedded on a shard that holds it, so its
text never crosses the cluster; only the vectors come back, in URN order.

Documents are grouped by the shard that coordinates them and, within that, by their owner set;
a group goes to its coordinator, else to its other owners in turn (a dead or unreachable one is
skipped; an owner's refusal, such as a missing document, reaches the client as given). A peer
sends its vectors as the model's float32 rows (``transport/vectors_wire.py``), not JSON; a peer
of an older version, which has no such route, is asked in JSON.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from prometheus_client import Counter

from ...errors import Unavailable
from ...storage.names import parse_urn, urn
from ..documents.coordinator import relay
from ..placement.owners import candidates, coordinator_groups
from ..placement.views import TopologySource
from ..transport.remote import PeerError, PeerUnavailable, RemoteExecutor
from ..transport.vectors_wire import decode_vectors

#: How long a peer that answered EMBED only in JSON (an older version) is not asked for rows.
OLDER_PEER_RECHECK_S = 60.0

Local = Callable[[list[tuple[str, str]]], Awaitable[list[list[float]]]]


class UrnEmbedding:
    def __init__(self, plan: TopologySource, executor: RemoteExecutor, counted: Counter) -> None:
        """``counted``: URNs embedded, by ``where`` (local or remote)."""
        self._plan = plan
        self.executor = executor
        self._counted = counted
        #: peers of an older version (no float32 EMBED route) → when to ask them for rows again
        self._json_embedders: dict[str, float] = {}

    async def embed_urns(self, urns: list[str], local: Local) -> list[list[float]]:
        """Embed each document on a shard holding it (``local`` embeds this shard's); results in
        URN order."""
        parsed = [parse_urn(u) for u in urns]
        topo = self._plan.topology
        if not topo.clustered:
            self._counted.labels(where="local").inc(len(parsed))
            return await local(parsed)
        down = self.executor.open_peers()
        groups = coordinator_groups(parsed, topo, down)
        out: dict[tuple[str, str], list[float]] = {}

        async def run(shard: str, keys: list[tuple[str, str]]) -> None:
            for target in candidates([shard, *[s for s in topo.owners(*keys[0]) if s != shard]], down):
                if target == topo.self_id:
                    vectors = await local(keys)
                    self._counted.labels(where="local").inc(len(keys))
                else:
                    try:
                        vectors = await self._embed_on(target, [urn(*k) for k in keys])
                    except PeerUnavailable:
                        continue
                    except PeerError as exc:
                        raise relay(exc) from None
                    self._counted.labels(where="remote").inc(len(keys))
                out.update(zip(keys, vectors, strict=True))
                return
            raise Unavailable(f"no shard holding {urn(*keys[0])} is reachable", code="owners_unavailable")

        # Keys in one group share a coordinator but maybe not all owners: regroup by owner set.
        by_owners: dict[tuple[str, tuple[str, ...]], list[tuple[str, str]]] = {}
        for shard, keys in groups.items():
            for k in keys:
                by_owners.setdefault((shard, tuple(topo.owners(*k))), []).append(k)
        await asyncio.gather(*(run(shard, keys) for (shard, _), keys in by_owners.items()))
        return [out[k] for k in parsed]

    async def _embed_on(self, peer: str, urns: list[str]) -> list[list[float]]:
        """``peer``'s embeddings of the documents ``urns`` names, sent as float32 rows. A shard
        of an older version has no such route (404 ``not_found``): it answers in JSON, and is
        asked so until :data:`OLDER_PEER_RECHECK_S` have passed (it may have been upgraded)."""
        body = {"urns": urns}
        if time.monotonic() >= self._json_embedders.get(peer, 0.0):
            try:
                raw = await self.executor.request(
                    peer,
                    "POST",
                    "/internal/embed/vectors",
                    json_body=body,
                    idempotent=True,
                    retries=0,
                    expect="bytes",
                )
            except PeerError as exc:
                if exc.status != 404 or exc.code != "not_found":
                    raise
                self._json_embedders[peer] = time.monotonic() + OLDER_PEER_RECHECK_S
            else:
                try:
                    return decode_vectors(raw, len(urns))
                except ValueError as exc:
                    raise PeerUnavailable(peer, "bad_response", str(exc)) from None
        reply = await self.executor.request(
            peer, "POST", "/internal/embed", json_body=body, idempotent=True, retries=0
        )
        return reply["embeddings"]
