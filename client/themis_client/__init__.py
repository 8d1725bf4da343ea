"""A typed Python client for Themis's REST API (documents, transactions, collections and search,
AQL, inference and streaming, embeddings, RAG, cluster status)."""

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

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
    AqlResult,
    BatchResult,
    ClusterStatus,
    Collection,
    Document,
    Embeddings,
    InferResult,
    Operation,
    RagResult,
    RagSource,
    SearchHit,
    SearchResult,
    StreamToken,
    TransactionResult,
    WriteResult,
)
from .retry import NO_RETRY, RetryPolicy


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
    "AqlResult",
    "AsyncInferStream",
    "AsyncThemisClient",
    "BadRequest",
    "BatchResult",
    "ClusterStatus",
    "Collection",
    "Conflict",
    "Document",
    "Embeddings",
    "Forbidden",
    "InferResult",
    "InferStream",
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
    "TransactionResult",
    "Unauthorized",
    "Unavailable",
    "VersionConflict",
    "WriteResult",
    "__version__",
]
