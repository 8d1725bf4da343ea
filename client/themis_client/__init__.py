"""A typed Python client for Themis's REST API (documents, transactions, collections and search,
AQL, inference, batches and streaming, embeddings, RAG, adapters, cluster and RAID status,
metrics)."""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from .calls import new_txn_id
from .client import AsyncInferStream, AsyncThemisClient, InferStream, ThemisClient
from .errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    ThemisConnectionError,
    ThemisError,
    Unauthorized,
    Unavailable,
    VersionConflict,
)
from .models import (
    Adapter,
    Adapters,
    AqlResult,
    BatchResult,
    Capability,
    ClusterStatus,
    Collection,
    Document,
    Embeddings,
    InferBatchResult,
    InferItemError,
    InferResult,
    Operation,
    RagResult,
    RagSource,
    SearchHit,
    SearchResult,
    StreamToken,
    TransactionOutcome,
    TransactionResult,
    WriteResult,
)
from .retry import NO_RETRY, RetryPolicy
from .routing import KeyRouter


def _version() -> str:
    """themisdb-client's version: the repository's one VERSION (client/VERSION links to it)."""
    try:
        return version("themisdb-client")
    except PackageNotFoundError:  # a bare checkout (the client imports nothing of the shard)
        try:
            return (Path(__file__).resolve().parents[1] / "VERSION").read_text().strip()
        except OSError:
            return "0+unknown"


__version__ = _version()

__all__ = [
    "NO_RETRY",
    "Adapter",
    "Adapters",
    "AqlResult",
    "AsyncInferStream",
    "AsyncThemisClient",
    "BadRequest",
    "BatchResult",
    "Capability",
    "ClusterStatus",
    "Collection",
    "Conflict",
    "Document",
    "Embeddings",
    "Forbidden",
    "InferBatchResult",
    "InferItemError",
    "InferResult",
    "InferStream",
    "KeyRouter",
    "NotFound",
    "Operation",
    "PayloadTooLarge",
    "RagResult",
    "RagSource",
    "RateLimited",
    "RetryPolicy",
    "SearchHit",
    "SearchResult",
    "ServerError",
    "StreamToken",
    "ThemisClient",
    "ThemisConnectionError",
    "ThemisError",
    "TransactionOutcome",
    "TransactionResult",
    "Unauthorized",
    "Unavailable",
    "VersionConflict",
    "WriteResult",
    "__version__",
    "new_txn_id",
]
