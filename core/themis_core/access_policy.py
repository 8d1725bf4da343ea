"""Which role a public route needs: one table, one pure function.

Roles are ordered: ``admin`` may do everything ``client`` may. ``None`` means the route is open
(health and readiness, always; metrics and the API description when configured so).
Shard-to-shard routes under ``/internal/`` are not governed by API keys: they are the cluster's
own (mTLS when TLS is on).
A public route the table does not name needs ``admin``, so a route added later is closed until
someone decides who may call it.
"""

from __future__ import annotations

from enum import IntEnum


class Role(IntEnum):
    client = 1
    admin = 2

    @classmethod
    def parse(cls, name: str) -> Role:
        try:
            return cls[name.strip().lower()]
        except KeyError:
            raise ValueError(
                f"unknown role {name!r} (expected one of: {', '.join(r.name for r in cls)})"
            ) from None


ALWAYS_OPEN = frozenset({"/health", "/ready"})
#: The API's own description. It holds no data but names every route, the admin ones included:
#: any valid key may read it, or anyone when ``docs_open`` (``THEMIS_AUTH_DOCS_OPEN``).
DOCS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})

#: (methods or "*", path prefix, role), first match wins; prefixes end at a path boundary.
POLICY: tuple[tuple[frozenset[str] | str, str, Role], ...] = (
    # inference, embeddings, RAG, the OpenAI-compatible surface
    ("*", "/v1/infer", Role.client),  # /v1/infer and /v1/infer:batch
    ("*", "/v1/embed", Role.client),
    ("*", "/v1/embeddings", Role.client),
    ("*", "/v1/rag", Role.client),
    ("*", "/v1/completions", Role.client),
    ("*", "/v1/chat/completions", Role.client),
    ("*", "/v1/models", Role.client),
    ("*", "/v1/files", Role.client),  # the Batch API's input and output files
    ("*", "/v1/batches", Role.client),
    # documents, search, transactions, AQL
    ("*", "/v1/collections", Role.client),
    ("*", "/v1/transactions", Role.client),  # and GET /v1/transactions/{id}: a client's own outcome
    ("*", "/v1/aql", Role.client),
    # adapters: listing is a client's question, loading and unloading is an operator's act
    (frozenset({"GET", "HEAD"}), "/v1/adapters", Role.client),
    ("*", "/v1/adapters", Role.admin),
    # RAID weights and cluster operations
    ("*", "/v1/raid", Role.admin),
    ("*", "/v1/cluster/backups", Role.admin),  # gates, snapshots and their files: the whole data
    ("*", "/v1/cluster", Role.admin),  # status, and /v1/cluster/transactions (list, {id}:resolve)
)


def _under(path: str, prefix: str) -> bool:
    if not path.startswith(prefix):
        return False
    rest = path[len(prefix) :]
    return rest == "" or rest[0] in "/:"


def is_governed(path: str, *, metrics_open: bool, docs_open: bool = False) -> bool:
    """Does this path need an API key at all?"""
    if path in ALWAYS_OPEN or _under(path, "/internal"):
        return False
    if path in DOCS:
        return not docs_open
    return not (path == "/metrics" and metrics_open)


def required_role(
    method: str, path: str, *, metrics_open: bool = True, docs_open: bool = False
) -> Role | None:
    """The least role that may call ``method path``; None when the route is open."""
    if not is_governed(path, metrics_open=metrics_open, docs_open=docs_open):
        return None
    if path == "/metrics" or path in DOCS:
        return Role.client
    method = method.upper()
    for methods, prefix, role in POLICY:
        if (methods == "*" or method in methods) and _under(path, prefix):
            return role
    return Role.admin
