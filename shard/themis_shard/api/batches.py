"""The OpenAI Batch API: ``/v1/files`` and ``/v1/batches`` (``batches`` package).

Handlers stay thin: FastAPI parses the multipart upload or the JSON body (a field OpenAI
defines that Themis does not take is refused by name), the ``BatchService`` on the node does
the rest. Any shard answers for any file or batch: they are documents.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, Query, UploadFile
from fastapi.responses import Response

from ..batches.model import UPLOAD_PURPOSES, CreateBatch
from ..batches.service import BatchService
from ..node import ShardNode
from .deps import current_node

router = APIRouter(tags=["batches"])
Node = Annotated[ShardNode, Depends(current_node)]
Limit = Annotated[int, Query(ge=1, le=100)]


def _service(node: ShardNode) -> BatchService:
    return node.batches


@router.post("/v1/files")
async def upload_file(
    node: Node,
    file: Annotated[UploadFile, File(description="JSONL: one request per line")],
    purpose: Annotated[str, Form(json_schema_extra={"enum": list(UPLOAD_PURPOSES)})],
):
    """Upload a JSONL input file (multipart, ``purpose`` "batch"); its lines are validated now."""
    data = await file.read()
    return await _service(node).upload(data, file.filename or "upload.jsonl", purpose)


@router.get("/v1/files")
async def list_files(node: Node, purpose: str | None = None, after: str | None = None, limit: Limit = 100):
    return await _service(node).files(purpose, after, limit)


@router.get("/v1/files/{file_id}")
async def get_file(file_id: str, node: Node):
    return await _service(node).store.file(file_id)


@router.get(
    "/v1/files/{file_id}/content",
    response_class=Response,
    responses={
        200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}
    },
)
async def file_content(file_id: str, node: Node):
    return Response(await _service(node).store.content(file_id), media_type="application/octet-stream")


@router.delete("/v1/files/{file_id}")
async def delete_file(file_id: str, node: Node):
    return await _service(node).store.delete_file(file_id)


@router.post("/v1/batches")
async def create_batch(body: CreateBatch, node: Node):
    """A batch over an uploaded file; it starts ``validating`` and runs on the cluster."""
    return await _service(node).create(body)


@router.get("/v1/batches")
async def list_batches(node: Node, after: str | None = None, limit: Limit = 20):
    return await _service(node).batches(after, limit)


@router.get("/v1/batches/{batch_id}")
async def get_batch(batch_id: str, node: Node):
    return await _service(node).store.batch(batch_id)


@router.post("/v1/batches/{batch_id}/cancel")
async def cancel_batch(batch_id: str, node: Node):
    return await _service(node).cancel(batch_id)
