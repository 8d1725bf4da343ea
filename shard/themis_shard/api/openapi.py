"""The OpenAPI document says what a shard really answers: one table of each public operation's
error statuses, rendered in the standard error shape.

FastAPI documents a 200 and a 422 per route; this shard never answers 422 (``api/errors.py``
turns validation errors into 400 ``invalid_request`` / ``unsupported_parameter`` /
``malformed_json``) and does answer 404/409/413/429/503 that no decorator mentions. So the
schema is post-processed here, once, from :data:`ERRORS` plus three rules every route obeys:
an operation with parameters or a body can be a 400, one with a body a 413 (the body limit
middleware), and one that needs the node a 503 while the shard starts. A test checks that the
table names exactly the public operations, so a new route cannot go undocumented.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    code: str = Field(..., description="snake_case, stable: what a client branches on")
    message: str = Field(..., description="for people; may change")


class ErrorBody(BaseModel):
    """Every error the shard answers: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


ERROR_SCHEMA = "Error"

#: What each status means on this API (the codes are examples, the route's docstring has more).
STATUS_TEXT: dict[int, str] = {
    400: "Bad input: malformed_json, unsupported_parameter (a field this API does not know, named), "
    "invalid_request or a more specific code",
    401: "No API key (unauthorized) or an unknown one (invalid_api_key)",
    403: "The API key's role may not call this route (forbidden)",
    404: "Not found: the collection, document, model, adapter or URN named",
    409: "Conflict: a version condition failed (version_conflict) or the state forbids it",
    410: "Gone: a document version the answer cites was compacted away (version_compacted, "
    "snapshot_unavailable)",
    413: "Too large: the body (payload_too_large) or a batch beyond the shard's limits",
    429: "Overloaded (queue_full): retry after the Retry-After header's seconds",
    502: "A source the shard fetches (an http(s) URL) could not be fetched",
    503: "Unavailable: the shard or its model is starting, a part is disabled, too few owners answered, "
    "a peer refused this shard's signed request (peer_auth_failed), or the disk failed the write "
    "(storage_failed); the message says whether anything was written",
    507: "The shard's disk is full (insufficient_storage): nothing was written; the shard is unready "
    "until it takes writes again",
}

DOCUMENTS = (404, 409, 503, 507)
INFERENCE = (404, 409, 429, 503)

#: (method, path) → the statuses beyond 200 a public operation answers with the error body
#: (the 400/413/503 of the rules above are added where they apply). Keep in step with the routes.
ERRORS: dict[tuple[str, str], tuple[int, ...]] = {
    ("GET", "/health"): (),
    ("GET", "/ready"): (),  # its 503 is {"ready": false}, documented on the route
    ("GET", "/metrics"): (),
    # documents
    ("GET", "/v1/collections"): (),
    ("PUT", "/v1/collections/{collection}"): (409, 507),
    ("GET", "/v1/collections/{collection}"): (404,),
    ("PUT", "/v1/collections/{collection}/documents/{key}"): DOCUMENTS,
    ("GET", "/v1/collections/{collection}/documents/{key}"): (404,),
    ("DELETE", "/v1/collections/{collection}/documents/{key}"): DOCUMENTS,
    ("POST", "/v1/collections/{collection}/documents:batch"): DOCUMENTS,
    ("POST", "/v1/transactions"): DOCUMENTS,
    ("GET", "/v1/transactions/{txn_id}"): (),
    ("POST", "/v1/collections/{collection}/search"): (404,),
    ("POST", "/v1/aql"): (404, 409, 429, 507),
    # cluster and RAID weights (503 raid_disabled on a shard without RAID)
    ("GET", "/v1/cluster/status"): (),
    ("GET", "/v1/cluster/transactions"): (),
    ("POST", "/v1/cluster/transactions/{txn_id}:resolve"): (),
    # a shard's part in a backup (409 another backup, gate not held, resharding; 503 decisions in flight)
    ("POST", "/v1/cluster/backups/{backup_id}/gate"): (409,),
    ("DELETE", "/v1/cluster/backups/{backup_id}/gate"): (),
    ("POST", "/v1/cluster/backups/{backup_id}/snapshot"): (409,),
    ("GET", "/v1/cluster/backups/{backup_id}/files/{path}"): (404,),
    ("DELETE", "/v1/cluster/backups/{backup_id}"): (),
    ("GET", "/v1/raid/status"): (),
    ("POST", "/v1/raid/verify"): (409,),
    ("POST", "/v1/raid/rebuild"): (409,),
    ("POST", "/v1/raid/models"): (409, 502),
    # inference (present when the shard runs an engine)
    ("POST", "/v1/infer"): INFERENCE,
    ("POST", "/v1/infer:batch"): INFERENCE,
    ("POST", "/v1/embed"): (404, 429),
    ("POST", "/v1/rag"): (*INFERENCE, 410),
    ("POST", "/v1/rag:replay"): (*INFERENCE, 410),
    ("GET", "/v1/adapters"): (404,),
    ("POST", "/v1/adapters"): (404, 409, 502),
    ("GET", "/v1/adapters/{name}"): (404,),
    ("DELETE", "/v1/adapters/{name}"): (404,),
    ("POST", "/v1/adapters:train"): (404, 409),
    ("POST", "/v1/adapters/{name}:federate"): (404, 409),
    ("GET", "/v1/models"): (),
    ("POST", "/v1/completions"): INFERENCE,
    ("POST", "/v1/chat/completions"): INFERENCE,
    ("POST", "/v1/embeddings"): (404, 429),
    # the Batch API
    ("POST", "/v1/files"): (),
    ("GET", "/v1/files"): (),
    ("GET", "/v1/files/{file_id}"): (404,),
    ("GET", "/v1/files/{file_id}/content"): (404,),
    ("DELETE", "/v1/files/{file_id}"): (404,),
    ("POST", "/v1/batches"): (404,),
    ("GET", "/v1/batches"): (),
    ("GET", "/v1/batches/{batch_id}"): (404,),
    ("POST", "/v1/batches/{batch_id}/cancel"): (404, 409),
}

#: Operations that answer a stream instead of JSON when the body asks for one (``stream: true``).
STREAMS: dict[tuple[str, str], str] = {
    ("POST", "/v1/infer"): "text/event-stream",
    ("POST", "/v1/infer:batch"): "application/x-ndjson",
    ("POST", "/v1/rag"): "text/event-stream",
    ("POST", "/v1/completions"): "text/event-stream",
    ("POST", "/v1/chat/completions"): "text/event-stream",
}

#: Operations the router may run on another shard: their answers name it in this header.
ROUTED = frozenset({("POST", "/v1/infer"), ("POST", "/v1/completions"), ("POST", "/v1/chat/completions")})
SHARD_HEADER = {
    "X-Themis-Shard": {
        "description": "the shard that generated the answer (a stream: the one it started on; its "
        "final frame names the one it moved to, if it moved), as in /v1/cluster/status",
        "schema": {"type": "string"},
    }
}

#: One item of each stream: an SSE event (its ``data`` a JSON object, ``[DONE]`` last), an NDJSON line.
STREAM_ITEM: dict[str, dict[str, Any]] = {
    "text/event-stream": {
        "type": "object",
        "required": ["data"],
        "properties": {"data": {"type": "string", "description": "a JSON object; [DONE] last"}},
    },
    "application/x-ndjson": {"type": "object", "description": "{index, ...result} per item"},
}

#: Operations that generate tokens: their ``max_tokens`` fields document the shard's limit.
GENERATES = frozenset(
    {
        ("POST", "/v1/infer"),
        ("POST", "/v1/infer:batch"),
        ("POST", "/v1/rag"),
        ("POST", "/v1/rag:replay"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/chat/completions"),
    }
)
TOKEN_BUDGETS = ("max_tokens", "max_completion_tokens")

#: Open even while the node starts: they answer from the app alone.
NO_NODE = frozenset({("GET", "/health"), ("GET", "/ready"), ("GET", "/metrics")})


def error_statuses(method: str, path: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses of one operation: its table entry plus the rules every route obeys."""
    key = (method.upper(), path)
    statuses = set(ERRORS.get(key, ()))
    has_body = "requestBody" in operation
    if has_body or operation.get("parameters"):
        statuses.add(400)
    if has_body:
        statuses.add(413)
    if key not in NO_NODE:
        statuses.add(503)
    return sorted(statuses)


def error_response(status: int) -> dict[str, Any]:
    return {
        "description": STATUS_TEXT[status],
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ERROR_SCHEMA}"}}},
    }


def document_errors(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every operation's real error statuses (and no 422, which it never answers)."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components[ERROR_SCHEMA] = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(components[ERROR_SCHEMA].pop("$defs", {}))
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict):
                continue
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            stream = STREAMS.get((method.upper(), path))
            if stream is not None:
                ok = responses.setdefault("200", {"description": "Successful Response"})
                ok.setdefault("content", {})[stream] = {"schema": STREAM_ITEM[stream]}
            if (method.upper(), path) in ROUTED:
                ok = responses.setdefault("200", {"description": "Successful Response"})
                ok.setdefault("headers", {}).update(SHARD_HEADER)
            for status in error_statuses(method, path, operation):
                responses.setdefault(str(status), error_response(status))
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return schema


def _refs(node: Any) -> set[str]:
    """Component names a schema fragment refers to (``#/components/schemas/<name>``)."""
    found: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                found.add(ref.rsplit("/", 1)[1])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _bound_token_ids(node: Any, n_vocab: int) -> None:
    """``maximum: n_vocab - 1`` on every array of token ids under ``node``."""
    if isinstance(node, dict):
        items = node.get("items")
        if node.get("type") == "array" and isinstance(items, dict) and items.get("type") == "integer":
            items["maximum"] = n_vocab - 1
        for value in node.values():
            _bound_token_ids(value, n_vocab)
    elif isinstance(node, list):
        for item in node:
            _bound_token_ids(item, n_vocab)


def document_engine_limits(
    schema: dict[str, Any], *, max_tokens: int, embedding_dimension: int | None, n_vocab: int | None = None
) -> dict[str, Any]:
    """``schema`` with what this shard's engine accepts, which only its settings and models know:
    ``maximum: max_tokens`` on every token budget of the generating operations' bodies (a larger
    one is 400 ``max_tokens_too_large``; 0 = no limit), the one ``dimensions`` the embedding
    model gives (another is 400 ``unsupported_parameter``), and the model's vocabulary as the
    bound of token-id prompts (another id is 400 ``invalid_token``)."""
    components = schema.get("components", {}).get("schemas", {})
    if n_vocab:
        _bound_token_ids(components.get("CompletionBody", {}).get("properties", {}).get("prompt"), n_vocab)
    prop = components.get("EmbeddingsBody", {}).get("properties", {}).get("dimensions")
    if prop is not None and embedding_dimension is not None:
        prop.pop("anyOf", None)
        prop["anyOf"] = [{"type": "integer", "enum": [embedding_dimension]}, {"type": "null"}]
    if not max_tokens:
        return schema
    limit = max_tokens
    todo: set[str] = set()
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if (method.upper(), path) in GENERATES and isinstance(operation, dict):
                todo |= _refs(operation.get("requestBody", {}))
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in components:
            continue
        seen.add(name)
        todo |= _refs(components[name])
        for field in TOKEN_BUDGETS:
            prop = components[name].get("properties", {}).get(field)
            for branch in [prop, *(prop or {}).get("anyOf", [])] if prop else []:
                if branch.get("type") == "integer":
                    branch["maximum"] = min(limit, branch.get("maximum", limit))
    return schema
