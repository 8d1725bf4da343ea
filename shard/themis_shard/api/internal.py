"""Shard-to-shard endpoints (``/internal/...``). They act locally and never forward again, so
any client request costs at most one extra hop."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from urllib.parse import unquote

import orjson
from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from themis_core.plan import ClusterPlan

from ..cluster.documents.coordinator import change_to_json, check_from_json, write_from_json
from ..cluster.membership.gossip_wire import InvalidGossipMessage
from ..cluster.placement.migration import encode_entry
from ..cluster.replication import tombstone_gc
from ..cluster.replication.fencing import DEFAULT_CONCERN, WriteConcern
from ..cluster.transport.remote import dumps
from ..errors import BadRequest, NotFound, ThemisError
from ..node import ShardNode
from ..rag.versions import read_as_of, read_version
from ..storage.collections import CollectionConfig
from ..storage.names import check_collection, check_key, urn
from ..storage.record_wire import decode_items, encode_items
from ..training.federation import LocalTrain, Publish
from .deps import current_node
from .frame_handlers import FrameHandler, FullRequest, frame_handler
from .search import SearchRequest

router = APIRouter(prefix="/internal", tags=["internal"], include_in_schema=False)
Node = Annotated[ShardNode, Depends(current_node)]


class WritesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    writes: list[dict[str, Any]]
    #: read validations (``storage.documents.Check``) checked with the writes
    checks: list[dict[str, Any]] = Field(default_factory=list)
    #: the forwarding shard's ring version: coordinated here only if it is ours too
    epoch: int
    concern: WriteConcern = DEFAULT_CONCERN


class Fence(BaseModel):
    model_config = ConfigDict(extra="forbid")
    epoch: int
    coordinator: str


class ItemsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[dict[str, Any]]
    #: set on a coordinated write (checked: epoch and coordinator); absent on repairs (hints,
    #: hand-over, anti-entropy), which stamps alone order
    fence: Fence | None = None


@router.post("/commit")
async def commit(body: WritesBody, shard: Node) -> dict:
    writes, checks = _writes_and_checks(body.writes, body.checks)
    changes = await shard.cluster.documents.commit_forwarded(writes, body.epoch, body.concern, checks)
    return {"changes": [change_to_json(c) for c in changes]}


def _writes_and_checks(writes: list[dict[str, Any]], checks: list[dict[str, Any]]):
    try:
        return [write_from_json(w) for w in writes], [check_from_json(c) for c in checks]
    except (KeyError, TypeError, ValueError) as exc:
        raise BadRequest(f"malformed writes: {exc}", code="invalid_request") from exc


# -- two-phase commit (cluster/transactions/): participant and coordinator endpoints -------------
#: a client's id (1-64 characters) or an attempt's name: the id, "@" and a 12-digit nonce
TxnName = Annotated[str, Field(min_length=1, max_length=77)]


class PrepareBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    txn: TxnName
    coordinator: str
    epoch: int
    writes: list[dict[str, Any]]
    checks: list[dict[str, Any]] = Field(default_factory=list)
    concern: WriteConcern = DEFAULT_CONCERN
    deciders: list[str] = Field(default_factory=list)


class ReplicaIntentBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    txn: TxnName
    coordinator: str
    primary: str
    epoch: int
    records: list[dict[str, Any]]
    deciders: list[str] = Field(default_factory=list)


class AcceptBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    txn: TxnName
    participants: list[str] = Field(default_factory=list)


class TxnBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    txn: TxnName


@router.post("/txn/prepare")
async def txn_prepare(body: PrepareBody, shard: Node) -> dict:
    """Phase 1 on a participant (the primary of these keys): vote yes with the stamped records."""
    writes, checks = _writes_and_checks(body.writes, body.checks)
    records = await shard.cluster.transactions.participant.prepare(
        body.txn, body.coordinator, body.epoch, writes, checks, body.concern, tuple(body.deciders)
    )
    return {"records": encode_items(records)}


@router.post("/txn/replica")
async def txn_replica(body: ReplicaIntentBody, shard: Node) -> dict:
    """Keep a replica copy of a participant's intent (durability at the write concern)."""
    try:
        records = decode_items(body.records)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadRequest(f"malformed records: {exc}", code="invalid_request") from exc
    await shard.cluster.transactions.participant.prepare_replica(
        body.txn, body.coordinator, body.primary, body.epoch, records, tuple(body.deciders)
    )
    return {"prepared": True}


@router.post("/txn/commit")
async def txn_commit(body: TxnBody, shard: Node) -> dict:
    """Phase 2: install the intent's records (idempotent)."""
    await shard.cluster.transactions.participant.commit(body.txn)
    return {"committed": True}


@router.post("/txn/abort")
async def txn_abort(body: TxnBody, shard: Node) -> dict:
    """Phase 2: drop the intent (idempotent)."""
    await shard.cluster.transactions.participant.abort(body.txn)
    return {"aborted": True}


@router.post("/txn/accept")
async def txn_accept(body: AcceptBody, shard: Node) -> dict:
    """As a decider: make the coordinator's COMMIT final here, unless fenced or decided before;
    answers the entry that stands."""
    entry = await run_in_threadpool(shard.cluster.transactions.log.accept, body.txn, body.participants)
    return {"decision": entry.decision.value}


@router.post("/txn/status")
async def txn_status(body: TxnBody, shard: Node) -> dict:
    """What this shard knows of a transaction: logged decision or fence, running, prepared."""
    return (await run_in_threadpool(shard.cluster.transactions.status, body.txn)).as_json()


@router.post("/txn/fence")
async def txn_fence(body: TxnBody, shard: Node) -> dict:
    """Promise never to accept this transaction's COMMIT (unless accepted already, or it is
    being coordinated here); answers the status after it."""
    return (await shard.cluster.transactions.fence(body.txn)).as_json()


@router.post("/txn/settle")
async def txn_settle(body: TxnBody, shard: Node) -> dict:
    """An operator's resolve: run termination for the intents of every attempt at the
    transaction's id here now."""
    settled = await shard.cluster.transactions.resolver.settle_id(body.txn, force=True)
    return {"decisions": {name: d.value if d else None for name, d in settled.items()}}


@router.get("/txn/list")
async def txn_list(shard: Node) -> dict:
    """This shard's intents, running and re-driven transactions (``themis txn list``)."""
    return await run_in_threadpool(shard.cluster.transactions.listing)


class KeysBody(BaseModel):
    keys: list[tuple[str, str]] = Field(..., max_length=10_000)


@router.post("/versions")
async def versions(body: KeysBody, shard: Node) -> dict:
    """This shard's version of each (collection, key), deletes included, 0 = never written:
    lets a shard about to drop copies send only what the owners lack."""
    for collection, _key in body.keys:
        check_collection(collection)
    return {"versions": await run_in_threadpool(shard.store.versions, body.keys)}


@router.post("/replicate")
async def replicate(body: ItemsBody, shard: Node) -> dict:
    return await replicate_items(body, shard)


async def replicate_items(body: ItemsBody, shard: ShardNode) -> dict:
    try:
        items = decode_items(body.items)
    except (KeyError, TypeError, ValueError) as exc:
        raise BadRequest(f"malformed replica items: {exc}", code="invalid_request") from exc
    if body.fence is not None:
        refusal = shard.cluster.documents.fence_refusal(
            body.fence.epoch,
            body.fence.coordinator,
            [(i.collection, i.key) for i in items],
        )
        if refusal is not None:
            raise refusal
        applied, newer = await run_in_threadpool(shard.store.apply_coordinated, items)
        return {"applied": len(applied), "newer": [encode_entry(e) for e in newer]}
    # staged here and waited for without a thread: the event loop is free during the fsync
    applied = await shard.store.apply_replicated_async(items)
    return {"applied": len(applied)}


@router.post("/replicate/batch")
async def replicate_batch(request: Request, shard: Node) -> Response:
    """Many coordinated writes in one request (``cluster/replication/batching.py``), each fenced and
    applied on its own and answered in order; one synced write for all of them. Parsed with
    orjson, without pydantic: this is the hottest internal route."""
    return Response(await replicate_batch_frame(shard, await request.body()), media_type="application/json")


async def replicate_batch_frame(shard: ShardNode, raw: bytes) -> bytes:
    try:
        body = orjson.loads(raw)
        raw = body["messages"]
        messages = [(decode_items(m["items"]), m["fence"]) for m in raw]
        fences = [(int(f["epoch"]), str(f["coordinator"])) for _, f in messages]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise BadRequest(f"malformed replication batch: {exc}", code="invalid_request") from exc
    results: list[dict[str, Any] | None] = [None] * len(messages)
    accepted: list[int] = []
    for i, ((items, _), (epoch, coordinator)) in enumerate(zip(messages, fences, strict=True)):
        refusal = shard.cluster.documents.fence_refusal(
            epoch, coordinator, [(r.collection, r.key) for r in items]
        )
        if refusal is not None:
            results[i] = _error_result(refusal)
        else:
            accepted.append(i)
    answers = await shard.store.apply_coordinated_many_async([messages[i][0] for i in accepted])
    for i, answer in zip(accepted, answers, strict=True):
        if isinstance(answer, ThemisError):
            results[i] = _error_result(answer)
        else:
            applied, newer = answer
            results[i] = {"applied": len(applied), "newer": [encode_entry(e) for e in newer]}
    return orjson.dumps({"results": results})


#: The hottest routes, run for a peer-channel frame (``api/channel.py``) without the ASGI
#: stack: ``handler(shard, body) -> JSON bytes``; a ``ThemisError`` is answered as the app would.
FRAME_HANDLERS: dict[tuple[str, str], FrameHandler] = {
    ("POST", "/internal/commit"): frame_handler(WritesBody, commit),
    ("POST", "/internal/replicate/batch"): replicate_batch_frame,
    ("POST", "/internal/replicate"): frame_handler(ItemsBody, replicate_items),
    # two-phase commit: each transaction makes several of these calls
    ("POST", "/internal/txn/prepare"): frame_handler(PrepareBody, txn_prepare),
    ("POST", "/internal/txn/replica"): frame_handler(ReplicaIntentBody, txn_replica),
    ("POST", "/internal/txn/accept"): frame_handler(AcceptBody, txn_accept),
    ("POST", "/internal/txn/commit"): frame_handler(TxnBody, txn_commit),
    ("POST", "/internal/txn/abort"): frame_handler(TxnBody, txn_abort),
}


def _error_result(exc: ThemisError) -> dict[str, Any]:
    return {"error": {"status": exc.status, "code": exc.code, "message": exc.message}}


@router.get("/documents/{collection}/{key}")
async def local_document(
    collection: str,
    key: str,
    shard: Node,
    tombstones: bool = False,
    epoch: int | None = None,
    primary_epoch: int | None = None,
) -> dict:
    """This shard's copy with its stamp; with ``tombstones`` a deleted key answers its delete
    version. ``epoch`` (a handoff's read-through): answered only once this shard runs it too.
    ``primary_epoch`` (a linearizable read): answered only as the key's primary in that epoch,
    holding its lease."""
    check_collection(collection)
    check_key(key)
    if primary_epoch is not None:
        found = shard.cluster.documents.primary_read(collection, key, primary_epoch)
    else:
        found = await shard.cluster.documents.local_entry(collection, key, epoch)
    if found is None or (found.document is None and not tombstones):
        raise NotFound(f"document {collection}/{key} does not exist", code="document_not_found")
    return {"version": found.version, "document": found.document, "hlc": found.hlc, "origin": found.origin}


#: A route with path parameters, for a frame: (shard, the path after its prefix, the query).
PathHandler = Callable[[ShardNode, str, str], Awaitable[bytes]]


async def primary_read_frame(shard: ShardNode, rest: str, query: str) -> bytes:
    """The linearizable read a non-primary forwards (``{collection}/{key}?primary_epoch=N``)
    without the ASGI stack; any other form of the request goes to the route."""
    collection, sep, key = rest.partition("/")
    name, _, value = query.partition("=")
    if not sep or "/" in key or name != "primary_epoch" or not (value.isascii() and value.isdigit()):
        raise FullRequest
    answer = await local_document(unquote(collection), unquote(key), shard, primary_epoch=int(value))
    return orjson.dumps(answer)


#: (method, path prefix) → (the route's template, for metrics; its handler).
PATH_HANDLERS: dict[tuple[str, str], tuple[str, PathHandler]] = {
    ("GET", "/internal/documents/"): ("/internal/documents/{collection}/{key}", primary_read_frame),
}


@router.get("/history/{collection}/{key}")
async def local_history(
    collection: str,
    key: str,
    shard: Node,
    version: int | None = None,
    hlc: int | None = None,
    as_of: int | None = None,
) -> dict:
    """This shard's record of a key at ``version`` (``hlc``: the stamp it must carry), or as it
    stood at hybrid time ``as_of``: ``{"record": {"version", "hlc", "document"} | null}``; 404
    ``version_not_found``, 410 ``version_compacted`` / ``snapshot_unavailable`` (``rag.versions``)."""
    check_collection(collection)
    check_key(key)
    if (version is None) == (as_of is None):
        raise BadRequest("give exactly one of version and as_of", code="invalid_request")
    if version is not None:
        record = await run_in_threadpool(read_version, shard.store, collection, key, version, hlc)
    else:
        record = await run_in_threadpool(read_as_of, shard.store, collection, key, as_of)
    return {"record": record}


class LeaseProbe(BaseModel):
    model_config = ConfigDict(extra="forbid")
    #: the plan authority's epoch: renews the lease only when it is this shard's too
    epoch: int = Field(..., ge=0)
    #: when the lease runs out, in this shard's monotonic clock (0: no lease)
    until: float = Field(..., ge=0)
    #: the authority's plan, sent while this shard runs an older epoch (its file may lag)
    plan: dict | None = None


@router.post("/lease")
async def lease(body: LeaseProbe, shard: Node) -> dict:
    """The plan authority's probe (``cluster/replication/lease.py``): adopt its newer plan,
    renew the primary lease, and report what the authority decides the in-sync set on (epoch,
    catch-up, hints held for peers) with this shard's clock, which the next lease is anchored on."""
    try:
        plan = ClusterPlan.model_validate(body.plan) if body.plan is not None else None
    except ValueError as e:
        raise BadRequest(f"plan: not a valid cluster plan ({e})", code="invalid_plan") from e
    return shard.cluster.lease_probe(body.epoch, body.until, plan)


@router.get("/collections")
async def collections(shard: Node) -> dict:
    return {"collections": [c.model_dump(mode="json") for c in shard.store.collections()]}


@router.put("/collections/{collection}")
async def declare(collection: str, config: CollectionConfig, shard: Node) -> dict:
    check_collection(collection)
    if config.name != collection:
        raise BadRequest("collection name mismatch", code="invalid_request")
    await shard.cluster.adopt_collection(config)
    return {"declared": collection}


@router.post("/collections/{collection}/search")
async def local_search(collection: str, body: SearchRequest, shard: Node) -> dict:
    if body.vector is None:
        raise BadRequest("internal search takes a vector", code="invalid_request")
    hits = await run_in_threadpool(shard.vectors.search, collection, body.vector, body.k, body.filter)
    return {
        "results": [
            {"urn": urn(collection, d.key), "score": h.score, "document": d.document}
            | {"version": d.version, "hlc": d.hlc}
            for h, d in hits
        ]
    }


class SyncRequest(BaseModel):
    shard: str
    ring: dict[str, Any]
    previous: dict[str, Any] | None = None
    copies: int
    unreachable: list[str] = []
    after: str | None = None


@router.post("/sync")
async def sync(body: SyncRequest, shard: Node) -> Response:
    """One page of the entries ``body.shard`` gained (resharding) or owns (catch-up). Serialised
    with orjson, not FastAPI's encoder: a page carries every document whole (500 of them with
    384-d vectors are 4 MB), and walking each float in Python made start-up catch-up of a
    restored cluster take minutes."""
    try:
        page = await run_in_threadpool(shard.cluster.serve_sync_page, body.model_dump())
    except (KeyError, ValueError) as exc:
        raise BadRequest(f"bad sync request: {exc}", code="invalid_request") from exc
    return Response(await run_in_threadpool(dumps, page), media_type="application/json")


class AntiEntropyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    peer: str
    ring_version: int
    #: the asking shard's plan epoch (both must agree on the in-sync set)
    epoch: int | None = None
    buckets: list[int] = Field(default_factory=list, max_length=100_000)


@router.post("/anti-entropy/digests")
async def anti_entropy_digests(body: AntiEntropyRequest, shard: Node) -> dict:
    """Merkle bucket digests of the records this shard shares with ``body.peer``."""
    return await run_in_threadpool(shard.cluster.anti_entropy.serve_digests, body.model_dump())


@router.post("/anti-entropy/records")
async def anti_entropy_records(body: AntiEntropyRequest, shard: Node) -> dict:
    """The shared records in the buckets that differed."""
    return await run_in_threadpool(shard.cluster.anti_entropy.serve_records, body.model_dump())


@router.get("/gc/watermark")
async def gc_watermark(shard: Node) -> dict:
    """The oldest stamp this shard could still send (tombstones below every member's are collected)."""
    return {"watermark": await run_in_threadpool(shard.cluster.tombstone_gc.watermark)}


@router.post("/gc/drop")
async def gc_drop(body: ItemsBody, shard: Node) -> dict:
    """Drop these tombstones where this shard holds exactly them; answer which were dropped."""
    try:
        items = [tombstone_gc.decode(i) for i in body.items]
    except (KeyError, TypeError, ValueError) as exc:
        raise BadRequest(f"malformed tombstones: {exc}", code="invalid_request") from exc
    dropped = await run_in_threadpool(shard.cluster.tombstone_gc.drop, items)
    return {"dropped": [tombstone_gc.encode(t) for t in dropped]}


@router.get("/migration")
async def migration(shard: Node) -> dict:
    return shard.cluster.migration.as_dict()


@router.post("/gossip")
async def gossip(request: Request, shard: Node) -> dict:
    if shard.cluster.gossiper is None:
        raise BadRequest("gossip is disabled on this shard (no cluster secret)", code="gossip_disabled")
    try:
        raw = await request.json()
        return await shard.cluster.gossiper.handle(raw)
    except (InvalidGossipMessage, ValueError) as exc:
        raise BadRequest(f"gossip message dropped: {exc}", code="invalid_gossip") from exc


@router.post("/federation/{name}/train")
async def federation_train(name: str, body: LocalTrain, shard: Node) -> dict:
    """A federated round's local steps on this shard's own documents: the LoRA factors and the
    sample count go back to the aggregator, the texts stay here."""
    update = await shard.federation.local.train(name, body)
    return update.model_dump(mode="json")


@router.post("/federation/{name}/publish")
async def federation_publish(name: str, body: Publish, shard: Node) -> dict:
    """Load the aggregator's round r+1, evaluate it on the domain's held-out set (then gossiped)."""
    published = await shard.federation.local.publish(name, body)
    return published.model_dump(mode="json")
