"""A transaction's outcome by its id (``GET /v1/transactions/{id}``: a client whose connection
broke mid-commit learns what happened), and the operator's view and resolution of transactions
in doubt (``/v1/cluster/transactions``, ``themis txn list|resolve``). The protocol behind the
answers is in ``cluster/transactions`` (``admin.py``)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, Field
from starlette.convertors import register_url_convertor

from ..cluster.transactions.admin import Answer
from ..errors import BadRequest
from ..node import ShardNode
from .deps import node
from .params import NameBeforeAction

router = APIRouter(prefix="/v1")
Node = Annotated[ShardNode, Depends(node)]

TXN_ID_PATTERN = r"^[A-Za-z0-9._~-]{1,64}$"
_TXN_ID = re.compile(TXN_ID_PATTERN)


TXN_ID_TEXT = "the id sent with POST /v1/transactions: 1-64 of A-Z a-z 0-9 . _ ~ -"
#: described in the schema; the handler's own check refuses (400 ``invalid_transaction_id``)
TxnId = Annotated[str, Path(description=TXN_ID_TEXT, json_schema_extra={"pattern": TXN_ID_PATTERN})]


def txn_id_field() -> Any:
    return Field(
        None,
        pattern=TXN_ID_PATTERN,
        description="the client's id for this transaction (1-64 of A-Z a-z 0-9 . _ ~ -), chosen "
        "before sending: `GET /v1/transactions/{id}` tells its outcome even when the response was "
        "lost. One attempt per id: resending it is refused (409 transaction_id_in_use), never applied "
        "twice. A transaction with an id always commits by two-phase commit.",
    )


register_url_convertor("txnid", NameBeforeAction())  # {id}:resolve


def _check(txn: str) -> str:
    if not _TXN_ID.match(txn):
        raise BadRequest(
            f"transaction id {txn[:80]!r} is not 1-64 of A-Z a-z 0-9 . _ ~ -", code="invalid_transaction_id"
        )
    return txn


class TransactionOutcome(BaseModel):
    id: str
    outcome: Literal["committed", "aborted", "in_progress", "unknown"] = Field(
        ...,
        description="committed: every write applied; aborted: none applied, and none ever will be; "
        "in_progress: prepared or being decided, ask again; unknown: no shard that answered knows it "
        "and more than one did not answer",
    )
    message: str
    unanswered: list[str] = Field(default_factory=list, description="shards that did not answer")


def _outcome(answer: Answer) -> TransactionOutcome:
    return TransactionOutcome(
        id=answer.txn,
        outcome=answer.outcome.value,
        message=answer.message,
        unanswered=list(answer.unanswered),
    )


@router.get("/transactions/{txn_id}", response_model=TransactionOutcome, tags=["documents"])
async def transaction_outcome(shard: Node, txn_id: TxnId) -> TransactionOutcome:
    """What became of the transaction with this id. An id no shard knows is fenced on every
    shard first, so it can never commit afterwards: "aborted" is then definite."""
    return _outcome(await shard.cluster.transactions.cluster.outcome(_check(txn_id)))


class HeldBy(BaseModel):
    shard: str
    role: Literal["primary", "replica"]
    primary: str


class TransactionRow(BaseModel):
    id: str
    attempt: str = Field(
        ..., description="the attempt's name inside the cluster: the id, @, and the attempt's nonce"
    )
    state: Literal["in_doubt", "running", "committing"] = Field(
        ...,
        description="in_doubt: prepared intents wait for a decision; running: its coordinator is "
        "running it; committing: committed, phase 2 still being re-sent",
    )
    coordinator: str | None
    deciders: list[str]
    keys: list[str]
    age_s: float
    held_by: list[HeldBy]


class TransactionList(BaseModel):
    transactions: list[TransactionRow]
    unanswered: list[str] = Field(default_factory=list, description="shards that did not answer")
    in_doubt_bound_s: float = Field(
        ..., description="an in-doubt transaction settles this long after its prepare"
    )


@router.get("/cluster/transactions", response_model=TransactionList, tags=["cluster"])
async def list_transactions(shard: Node) -> TransactionList:
    """Every transaction a shard still holds prepared, coordinates, or re-sends the commit of."""
    txns = shard.cluster.transactions
    rows, silent = await txns.cluster.listing()
    return TransactionList(
        transactions=[TransactionRow.model_validate(r) for r in rows if r["state"] != "none"],
        unanswered=list(silent),
        in_doubt_bound_s=txns.settings.in_doubt_bound_s,
    )


@router.post(
    "/cluster/transactions/{txn_id:txnid}:resolve", response_model=TransactionOutcome, tags=["cluster"]
)
async def resolve_transaction(shard: Node, txn_id: TxnId) -> TransactionOutcome:
    """Settle a transaction now: every shard holding it runs termination without waiting for the
    timeout (its deciders are fenced, so a coordinator still running it aborts it), then the
    outcome is answered. ``unknown``/``in_progress`` name what it still waits for."""
    return _outcome(await shard.cluster.transactions.cluster.resolve(_check(txn_id)))
