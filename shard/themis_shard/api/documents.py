"""Collections, documents, batches and transactions (API.md "Documents")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ..cluster.replication.fencing import WriteConcern, parse_concern
from ..cluster.transactions.decisions import kind as transaction_kind
from ..errors import BadRequest, PayloadTooLarge
from ..node import ShardNode
from ..storage.collections import CollectionConfig, CollectionSettings
from ..storage.documents import Change, Check, Write
from ..storage.names import check_collection, check_key, urn
from .deps import current_node, document_service, parse_if_match
from .params import CollectionName, DocumentKey, IfMatch, collection_field, key_field
from .transactions import txn_id_field

router = APIRouter(prefix="/v1", tags=["documents"])
Node = Annotated[ShardNode, Depends(current_node)]


async def write_concern(
    w: Annotated[
        str | None,
        Query(
            description="write concern: owners that hold the write durably before the 200 — "
            "`all` (default: every copy, RAID1/5 2, RAID6 3), `majority` or `1`",
            pattern="^(1|majority|all)$",
        ),
    ] = None,
) -> WriteConcern:
    return parse_concern(w)


Concern = Annotated[WriteConcern, Depends(write_concern)]


class CollectionInfo(CollectionConfig):
    documents: int
    vectors: int


class WriteResult(BaseModel):
    urn: str
    version: int


class DocumentOut(BaseModel):
    urn: str
    version: int
    document: dict[str, Any]


class BatchItem(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    key: str = key_field()
    document: dict[str, Any]


class BatchRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    documents: list[BatchItem] = Field(..., json_schema_extra={"minItems": 1})  # else 400 empty_batch


class BatchResponse(BaseModel):
    results: list[WriteResult]


class Operation(BaseModel):
    """``put``/``delete`` write (``if_version``: a condition); ``check`` writes nothing and
    asserts the key's version (``if_version`` required, 0 = absent) — the read set of a
    serializable transaction."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={  # else 400 invalid_operation
            "oneOf": [
                {
                    "properties": {"op": {"const": "put"}, "document": {"type": "object"}},
                    "required": ["document"],
                },
                {"properties": {"op": {"const": "delete"}, "document": {"type": "null"}}},
                {
                    "properties": {
                        "op": {"const": "check"},
                        "document": {"type": "null"},
                        "if_version": {"type": "integer", "minimum": 0},
                    },
                    "required": ["if_version"],
                },
            ]
        },
    )
    op: Literal["put", "delete", "check"]
    collection: str = collection_field()
    key: str = key_field()
    document: dict[str, Any] | None = None
    if_version: int | None = Field(None, ge=0)


class TransactionRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    operations: list[Operation] = Field(..., json_schema_extra={"minItems": 1})  # else empty_transaction
    id: str | None = txn_id_field()


class TransactionResult(BaseModel):
    op: Literal["put", "delete", "check"]
    urn: str
    version: int


class TransactionResponse(BaseModel):
    committed: bool
    results: list[TransactionResult]
    id: str | None = None


def _info(shard: ShardNode, config: CollectionConfig) -> CollectionInfo:
    return CollectionInfo(
        **config.model_dump(),
        documents=shard.store.count(config.name),
        vectors=shard.vectors.size(config.name),
    )


def _record(shard: ShardNode, changes: list[Change], op: str) -> None:
    shard.metrics.record_document_ops(op, len(changes))


@router.get("/collections", response_model=list[CollectionInfo])
async def list_collections(shard: Node) -> list[CollectionInfo]:
    return [_info(shard, c) for c in shard.store.collections()]


@router.put("/collections/{collection}", response_model=CollectionInfo)
async def declare_collection(
    collection: CollectionName, shard: Node, spec: CollectionSettings | None = None
) -> CollectionInfo:
    check_collection(collection)
    spec = spec or CollectionSettings()
    values = spec.model_dump()
    if spec.embed_field:
        if shard.llm is None:
            raise BadRequest(
                "embed_field needs a shard with an embedding model", code="embedding_unavailable"
            )
        dim = int(shard.llm.embedding_dimension)
        if spec.dimension not in (None, dim):
            raise BadRequest(
                f"the embedding model produces dimension {dim}, not {spec.dimension}",
                code="dimension_mismatch",
            )
        values["dimension"] = dim
    config = CollectionConfig(name=collection, **values)

    def declare() -> CollectionConfig:
        declared = shard.store.declare_collection(config)
        shard.vectors.declare(declared)
        return declared

    declared = await run_in_threadpool(declare)
    await shard.cluster.broadcast_collection(declared)
    return _info(shard, declared)


@router.get("/collections/{collection}", response_model=CollectionInfo)
async def get_collection(collection: CollectionName, shard: Node) -> CollectionInfo:
    return _info(shard, shard.store.collection(collection))


@router.put("/collections/{collection}/documents/{key}", response_model=WriteResult)
async def put_document(
    collection: CollectionName,
    key: DocumentKey,
    shard: Node,
    document: Annotated[dict[str, Any], Body(description="the document, a JSON object")],
    concern: Concern,
    if_match: IfMatch = None,
) -> WriteResult:
    return await put_one(shard, collection, key, document, concern, if_match)


async def put_one(
    shard: ShardNode,
    collection: str,
    key: str,
    document: dict[str, Any],
    concern: WriteConcern,
    if_match: str | None = None,
) -> WriteResult:
    """Write one document: the route's work, shared with ``api/hot_paths.py``."""
    check_collection(collection)
    check_key(key)
    changes = await document_service(shard).commit(
        [Write(collection, key, document, parse_if_match(if_match))], concern
    )
    _record(shard, changes, "put")
    return WriteResult(urn=urn(collection, key), version=changes[0].version)


@router.get("/collections/{collection}/documents/{key}", response_model=DocumentOut)
async def get_document(collection: CollectionName, key: DocumentKey, shard: Node) -> DocumentOut:
    return await get_one(shard, collection, key)


async def get_one(shard: ShardNode, collection: str, key: str) -> DocumentOut:
    """Read one document: the route's work, shared with ``api/hot_paths.py``."""
    check_collection(collection)
    check_key(key)
    doc = await shard.cluster.documents.get(collection, key)
    shard.metrics.record_document_ops("get")
    return DocumentOut(urn=urn(collection, key), version=doc.version, document=doc.document)


@router.delete("/collections/{collection}/documents/{key}", response_model=WriteResult)
async def delete_document(
    collection: CollectionName, key: DocumentKey, shard: Node, concern: Concern, if_match: IfMatch = None
) -> WriteResult:
    check_collection(collection)
    check_key(key)
    changes = await shard.cluster.documents.commit(
        [Write(collection, key, None, parse_if_match(if_match))], concern
    )
    _record(shard, changes, "delete")
    return WriteResult(urn=urn(collection, key), version=changes[0].version)


@router.post("/collections/{collection}/documents:batch", response_model=BatchResponse)
async def batch_documents(
    collection: CollectionName, body: BatchRequest, shard: Node, concern: Concern
) -> BatchResponse:
    """Insert or replace many documents durably; atomic per owning shard (one shard: all-or-nothing)."""
    check_collection(collection)
    if not body.documents:
        raise BadRequest("documents must not be empty", code="empty_batch")
    if len(body.documents) > shard.settings.max_batch_documents:
        raise PayloadTooLarge(
            f"at most {shard.settings.max_batch_documents} documents per batch", code="batch_too_large"
        )
    keys = [check_key(item.key) for item in body.documents]
    if len(set(keys)) != len(keys):
        raise BadRequest("duplicate keys in batch", code="duplicate_keys")
    writes = [Write(collection, i.key, i.document) for i in body.documents]
    changes = await document_service(shard).commit_batch(writes, concern)
    _record(shard, changes, "put")
    return BatchResponse(
        results=[WriteResult(urn=urn(c.collection, c.key), version=c.version) for c in changes]
    )


@router.post("/transactions", response_model=TransactionResponse)
async def transaction(body: TransactionRequest, shard: Node, concern: Concern) -> TransactionResponse:
    """All-or-nothing: any failed condition (409) or invalid operation (4xx) applies nothing.

    Keys with one coordinating shard commit there; keys on several shards commit by two-phase
    commit coordinated by this shard. ``check`` operations validate versions without writing:
    with them a read-write transaction is serializable (``cluster/transactions``)."""
    return await transact(shard, body, concern)


async def transact(shard: ShardNode, body: TransactionRequest, concern: WriteConcern) -> TransactionResponse:
    """Run a transaction: the route's work, shared with ``api/hot_paths.py``."""
    if not body.operations:
        raise BadRequest("operations must not be empty", code="empty_transaction")
    if len(body.operations) > shard.settings.max_transaction_operations:
        raise PayloadTooLarge(
            f"at most {shard.settings.max_transaction_operations} operations per transaction",
            code="transaction_too_large",
        )
    writes: list[Write] = []
    checks: list[Check] = []
    for i, op in enumerate(body.operations):
        if op.op == "put" and op.document is None:
            raise BadRequest(f"operations[{i}]: put needs a document", code="invalid_operation")
        if op.op in ("delete", "check") and op.document is not None:
            raise BadRequest(f"operations[{i}]: {op.op} takes no document", code="invalid_operation")
        if op.op == "check":
            if op.if_version is None:
                raise BadRequest(f"operations[{i}]: check needs if_version", code="invalid_operation")
            check_collection(op.collection)
            check_key(op.key)
            checks.append(Check(op.collection, op.key, op.if_version))
        else:
            writes.append(Write(op.collection, op.key, op.document, op.if_version))
    kind = transaction_kind(
        [(w.collection, w.key) for w in writes] + [(c.collection, c.key) for c in checks],
        shard.cluster.topology,
    )
    if body.id is not None:  # its outcome is logged by two-phase commit, whatever its keys
        kind = "cross"
    outcomes = shard.cluster.transactions.metrics.outcomes
    # Embedded before the commit is tried: a write refused here counts as no aborted transaction.
    writes = await document_service(shard).embed_missing(writes)
    try:
        if body.id is not None:
            changes = await shard.cluster.transactions.run(writes, checks, concern, body.id)
        else:
            changes = await shard.cluster.documents.commit(writes, concern, checks)
    except Exception:
        shard.metrics.transactions.labels(outcome="aborted").inc()
        if kind == "single":  # cross-shard outcomes are counted by their coordinator
            outcomes.labels(kind=kind, outcome="aborted").inc()
        raise
    shard.metrics.transactions.labels(outcome="committed").inc()
    if kind == "single":
        outcomes.labels(kind=kind, outcome="committed").inc()
    _record(shard, changes, "transaction")
    written = iter(changes)
    results = []
    for op in body.operations:
        if op.op == "check":
            results.append(
                TransactionResult(op="check", urn=urn(op.collection, op.key), version=op.if_version)
            )
            continue
        c = next(written)
        results.append(
            TransactionResult(
                op="put" if c.document is not None else "delete",
                urn=urn(c.collection, c.key),
                version=c.version,
            )
        )
    return TransactionResponse(committed=True, results=results, id=body.id)
