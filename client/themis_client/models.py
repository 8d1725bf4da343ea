"""Response types of the public API (API.md), as pydantic models.

The client is installable without the shard (no import of ``themis_shard``), so these mirror
the server's response models rather than import them. They accept fields they do not name
(``extra="allow"``): a newer server that adds a field does not break an older client.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class WriteResult(_Model):
    urn: str
    version: int


class Document(_Model):
    urn: str
    version: int
    document: dict[str, Any]


class BatchResult(_Model):
    results: list[WriteResult]


class Operation(BaseModel):
    """One operation of a transaction (``POST /v1/transactions``). ``check`` writes nothing: it
    asserts a key's version (0 = absent), so a transaction that lists every key it read with
    ``check`` (or ``if_version`` on a write) is serializable."""

    model_config = ConfigDict(extra="forbid")

    op: Literal["put", "delete", "check"]
    collection: str
    key: str
    document: dict[str, Any] | None = None
    if_version: int | None = None

    @classmethod
    def put(
        cls, collection: str, key: str, document: dict[str, Any], if_version: int | None = None
    ) -> Operation:
        return cls(op="put", collection=collection, key=key, document=document, if_version=if_version)

    @classmethod
    def delete(cls, collection: str, key: str, if_version: int | None = None) -> Operation:
        return cls(op="delete", collection=collection, key=key, if_version=if_version)

    @classmethod
    def check(cls, collection: str, key: str, version: int) -> Operation:
        """Abort the transaction (409) unless ``collection/key`` is still at ``version``."""
        return cls(op="check", collection=collection, key=key, if_version=version)


class TransactionItem(_Model):
    op: Literal["put", "delete", "check"]
    urn: str
    version: int


class TransactionResult(_Model):
    committed: bool
    results: list[TransactionItem]
    id: str | None = None


class TransactionOutcome(_Model):
    """``GET /v1/transactions/{id}``: what became of a transaction sent with that id."""

    id: str
    outcome: Literal["committed", "aborted", "in_progress", "unknown"]
    message: str
    unanswered: list[str] = Field(default_factory=list)

    @property
    def settled(self) -> bool:
        """Committed or aborted: the answer will not change."""
        return self.outcome in ("committed", "aborted")


class Collection(_Model):
    name: str
    dimension: int | None = None
    index: str | None = None
    embed_field: str | None = None
    documents: int = 0
    vectors: int = 0


class SearchHit(_Model):
    urn: str
    score: float
    document: dict[str, Any]


class SearchResult(_Model):
    results: list[SearchHit]
    shards_failed: list[str] = Field(default_factory=list)


class AqlResult(_Model):
    result: list[Any]
    stats: dict[str, Any] = Field(default_factory=dict)


class Timings(_Model):
    ttft_ms: float | None = None
    total_ms: float | None = None


class InferResult(_Model):
    text: str | None = None
    tokens: int | None = None
    shard_id: str | None = None
    timings: Timings = Field(default_factory=Timings)


class ItemError(_Model):
    code: str
    message: str = ""


class InferItemError(_Model):
    """A batch item that failed (its shard died, it timed out): ``{"error"}`` in its place."""

    error: ItemError


def _batch_item_kind(value: Any) -> str:
    """An item with an ``error`` is a failure: every field of ``InferResult`` is optional, so
    without this an error item would also parse as an (empty) result."""
    if isinstance(value, dict):
        return "error" if "error" in value else "ok"
    return "error" if isinstance(value, InferItemError) else "ok"


class InferBatchResult(_Model):
    """``POST /v1/infer:batch``: one entry per request, in request order."""

    results: list[
        Annotated[
            Annotated[InferResult, Tag("ok")] | Annotated[InferItemError, Tag("error")],
            Discriminator(_batch_item_kind),
        ]
    ]


class StreamToken(_Model):
    """One ``data: {"token", "id"}`` event of a streamed generation."""

    token: str
    id: int | None = None


class Embeddings(_Model):
    embeddings: list[list[float]]
    dimension: int | None = None
    model: str | None = None
    urns: list[str] | None = None


class RagSource(_Model):
    """A passage an answer cites: the document at ``version`` (``hlc``: that version's stamp)."""

    urn: str
    version: int | None = None
    hlc: int | None = None
    score: float | None = None


class RagResult(_Model):
    answer: str | None = None
    sources: list[RagSource] = Field(default_factory=list)
    #: The shard that generated the answer (the domain's shard, a KV-prefix holder, or the one asked).
    shard_id: str | None = None
    model: str | None = None
    adapter: str | None = None
    #: The seed the generation ran with (the shard's pick when none was asked).
    seed: int | None = None
    #: ``consistency="snapshot"``: the hybrid time every passage was read at.
    snapshot_hlc: int | None = None
    #: The body ``rag_replay`` takes back, as is.
    replay: dict[str, Any] | None = None
    #: ``rag_replay``: whether the answer came out exactly as the recorded one (None: none sent).
    reproduced: bool | None = None
    timings: dict[str, Any] = Field(default_factory=dict)


class Adapter(_Model):
    """A LoRA adapter loaded on the answering shard (``evaluating`` until its held-out run ends)."""

    name: str
    domain: str | None = None
    path: str | None = None
    sha256: str | None = None
    evaluating: bool = False
    evaluation: dict[str, Any] | None = None


class Adapters(_Model):
    model: str | None = None
    adapters: list[Adapter] = Field(default_factory=list)


class Member(_Model):
    shard_id: str
    url: str | None = None
    state: str | None = None


class Capability(_Model):
    """A gossiped adapter announcement: ``shard_id`` serves ``adapter_id`` for ``domain``."""

    shard_id: str = ""
    adapter_id: str = ""
    domain: str = ""
    active: bool = True


class Ring(_Model):
    """The cluster's consistent-hash ring (``routing.KeyRouter`` rebuilds it to find primaries)."""

    shards: list[str]
    vnodes: int
    seed: int = 0
    version: int = 0


class ClusterStatus(_Model):
    """``GET /v1/cluster/status``; the migration block is what ``themis scale`` follows."""

    shard_id: str = ""
    cluster: str = ""
    ring_version: int | None = None
    raid_mode: str = ""
    copies: int = 0
    #: None from a shard that predates it (then no token-aware routing).
    ring: Ring | None = None
    members: list[Member] = Field(default_factory=list)
    draining: list[str] = Field(default_factory=list)
    migration: dict[str, Any] = Field(default_factory=dict)
    #: Every live adapter announcement the answering shard knows of, cluster-wide.
    capabilities: list[Capability] = Field(default_factory=list)
    #: Peer → hinted writes waiting for it.
    hints_pending: dict[str, int] = Field(default_factory=dict)
    #: Where this shard's speculative drafts come from (None on a shard without an LLM).
    speculation: dict[str, Any] | None = None


class Health(_Model):
    status: str
    shard_id: str | None = None
    ring_version: int | None = None
