"""Federated LoRA rounds for one domain (FedAvg, the paper's incremental training across shards).

One round r → r+1, coordinated by the shard that was asked (it is also the aggregator):

1. every participant trains ``local_steps`` on the texts *it* holds, from round r's global
   adapter (round 0: the same seeded fresh LoRA everywhere), and answers its LoRA factors and
   its sample count — ``POST /internal/federation/{name}/train``, signed like every internal call;
   the documents never leave their shard;
2. the aggregator averages the factors weighted by sample count (``fedavg``);
3. it publishes round r+1 to the participants (``POST /internal/federation/{name}/publish``):
   each writes ``<weights>/trained/<name>.gguf`` with federation_round = r+1 and the total
   sample count, loads it in place of round r, evaluates it on the domain's held-out set and
   answers the evaluation; gossip then announces federation_round, training_samples and
   accuracy_delta (``cluster/membership/announcer.py`` reads them from the file and the evaluation).

``Federation.run`` is the round loop over :class:`Participant` s; the HTTP shape of a remote
participant is :class:`RemoteParticipant`, this shard's own is :class:`LocalParticipant`.
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..cluster.transport.remote import PeerError, PeerUnavailable, RemoteExecutor, internal_path
from ..errors import BadRequest, ThemisError, Unavailable
from .fedavg import fedavg
from .lora import LoraWeights, read_lora_gguf

if TYPE_CHECKING:
    from ..llm.lora import AdapterManager
    from .service import TrainingService

ADAPTER_NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"


def check_name(name: str) -> str:
    """Adapter names become file names on every participant: never a path."""
    if not re.fullmatch(ADAPTER_NAME, name):
        raise BadRequest("adapter name must be 1-64 chars of [a-z0-9-_.]", code="invalid_adapter_name")
    return name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FederateBody(_Strict):
    """``POST /v1/adapters/{name}:federate``: any other field is refused by name."""

    domain: str = Field(min_length=1, max_length=64)
    collection: str
    text_field: str = "text"
    rounds: int = Field(1, ge=1, le=100)
    local_steps: int = Field(10, ge=1, le=2000, description="E: steps each shard trains per round")
    rank: int = Field(8, ge=1, le=64)
    learning_rate: float = Field(3e-3, gt=0, le=1)
    batch: int = Field(4, ge=1, le=64)
    max_tokens: int = Field(48, ge=2, le=512, description="tokens per document trained on (its head)")
    max_documents: int = Field(256, ge=1, le=10_000)
    #: shard ids to federate over; default every member (those holding no such text sit out)
    participants: list[str] | None = Field(None, min_length=1)


class WireLora(_Strict):
    """LoRA factors on the wire: little-endian float32, base64 (rank 8 on Gemma 3 270M: ~90 kB)."""

    target: str
    alpha: float
    a: str
    a_shape: tuple[int, int]
    b: str
    b_shape: tuple[int, int]


def to_wire(lora: LoraWeights) -> WireLora:
    def enc(x: np.ndarray) -> str:
        return base64.b64encode(np.ascontiguousarray(x, "<f4").tobytes()).decode()

    return WireLora(
        target=lora.target,
        alpha=lora.alpha,
        a=enc(lora.a),
        a_shape=lora.a.shape,
        b=enc(lora.b),
        b_shape=lora.b.shape,
    )


def from_wire(w: WireLora) -> LoraWeights:
    def dec(data: str, shape: tuple[int, int]) -> np.ndarray:
        x = np.frombuffer(base64.b64decode(data), "<f4")
        if x.size != shape[0] * shape[1]:
            raise BadRequest(
                f"LoRA factor of {x.size} values does not have shape {shape}", code="invalid_request"
            )
        return x.reshape(shape).astype(np.float32)

    return LoraWeights(w.target, dec(w.a, w.a_shape), dec(w.b, w.b_shape), w.alpha)


class LocalTrain(_Strict):
    """``/internal/federation/{name}/train``: one participant's local steps of one round."""

    domain: str
    collection: str
    text_field: str
    steps: int = Field(ge=1)
    rank: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    batch: int = Field(ge=1)
    max_tokens: int = Field(ge=2)
    max_documents: int = Field(ge=1)
    round: int = Field(ge=0)
    #: round r's global adapter; None: start from the seeded fresh LoRA (every shard the same)
    start: WireLora | None = None


class LocalUpdate(_Strict):
    shard_id: str
    samples: int
    losses: list[float] = []
    lora: WireLora | None = None  # None when the shard holds no text to train on


class Publish(_Strict):
    """``/internal/federation/{name}/publish``: round r+1's global adapter."""

    domain: str
    round: int = Field(ge=1)
    training_samples: int = Field(ge=1)
    lora: WireLora


class Published(_Strict):
    shard_id: str
    round: int
    accuracy_delta: float | None = None
    evaluation: dict | None = None


class Participant(Protocol):
    shard_id: str

    async def train(self, name: str, req: LocalTrain) -> LocalUpdate: ...

    async def publish(self, name: str, req: Publish) -> Published: ...


class LocalParticipant:
    """This shard as a participant: trains on its own store, loads what the aggregator publishes."""

    def __init__(
        self, shard_id: str, training: TrainingService, adapters: Callable[[], AdapterManager]
    ) -> None:
        self.shard_id = shard_id
        self.training = training
        self._adapters = adapters

    async def train(self, name: str, req: LocalTrain) -> LocalUpdate:
        check_name(name)
        texts = self.training.local_texts(req.collection, req.text_field, req.max_documents)
        if not texts:
            return LocalUpdate(shard_id=self.shard_id, samples=0)
        start = from_wire(req.start) if req.start is not None else None
        lora, samples, losses = await self.training.local_update(
            texts, req.steps, start, req.rank, req.learning_rate, req.batch, req.max_tokens
        )
        return LocalUpdate(shard_id=self.shard_id, samples=samples, losses=losses, lora=to_wire(lora))

    async def publish(self, name: str, req: Publish) -> Published:
        check_name(name)
        lora = from_wire(req.lora)
        path = await asyncio.to_thread(
            self.training.write, name, req.domain, lora, req.training_samples, req.round
        )
        adapters = self._adapters()
        if name in {a.name for a in adapters.list()}:
            await adapters.unload(name)  # round r+1 replaces round r
        await adapters.load(name, str(path), domain=req.domain, evaluate=True)
        self.training.loaded.record(name, req.domain)
        ev = await adapters.evaluated(name)
        return Published(
            shard_id=self.shard_id,
            round=req.round,
            accuracy_delta=(ev or {}).get("accuracy_delta"),
            evaluation=ev,
        )

    def current(self, name: str, domain: str) -> tuple[LoraWeights, int] | None:
        """The global adapter this shard last loaded for ``name`` and its round, if it serves
        ``domain`` (a later federate call continues from it)."""
        path = self.training.out_dir / f"{name}.gguf"
        if not path.is_file():
            return None
        lora, meta = read_lora_gguf(Path(path))
        if meta.get("themis.domain") != domain or int(meta.get("themis.federation_round", 0)) < 1:
            return None
        return lora, int(meta["themis.federation_round"])


class RemoteParticipant:
    """A peer as a participant, over the remote executor (signed /internal calls, no retries of a
    training POST; ``timeout_s`` covers a round's local steps on a loaded CPU)."""

    def __init__(self, shard_id: str, executor: RemoteExecutor, timeout_s: float) -> None:
        self.shard_id = shard_id
        self.executor = executor
        self.timeout_s = timeout_s

    async def _call(self, name: str, what: str, body: BaseModel, model: type[BaseModel]):
        try:
            return await self.executor.request(
                self.shard_id,
                "POST",
                internal_path("federation", name, what),
                json_body=body.model_dump(mode="json"),
                model=model,
                retries=0,
                timeout_s=self.timeout_s,
            )
        except PeerError as exc:
            raise ThemisError(f"{self.shard_id}: {exc.message}", code=exc.code, status=exc.status) from exc
        except PeerUnavailable as exc:
            raise Unavailable(f"federation participant {exc}", code="participant_unavailable") from exc

    async def train(self, name: str, req: LocalTrain) -> LocalUpdate:
        return await self._call(name, "train", req, LocalUpdate)

    async def publish(self, name: str, req: Publish) -> Published:
        return await self._call(name, "publish", req, Published)


class RoundResult(BaseModel):
    round: int
    training_samples: int
    updates: list[dict]
    published: list[Published]


async def run_rounds(
    name: str,
    body: FederateBody,
    participants: Sequence[Participant],
    start: tuple[LoraWeights, int] | None = None,
) -> list[RoundResult]:
    """``body.rounds`` FedAvg rounds from ``start`` (the current global adapter and its round) or
    from scratch; each round's updates and what every participant measured after loading it."""
    if not participants:
        raise BadRequest("no shard to federate over", code="invalid_request")
    current, r = start if start is not None else (None, 0)
    results: list[RoundResult] = []
    for _ in range(body.rounds):
        req = LocalTrain(
            domain=body.domain,
            collection=body.collection,
            text_field=body.text_field,
            steps=body.local_steps,
            rank=body.rank,
            learning_rate=body.learning_rate,
            batch=body.batch,
            max_tokens=body.max_tokens,
            max_documents=body.max_documents,
            round=r,
            start=to_wire(current) if current is not None else None,
        )
        updates = await asyncio.gather(*(p.train(name, req) for p in participants))
        trained = [u for u in updates if u.samples > 0 and u.lora is not None]
        if not trained:
            raise BadRequest(
                f"no participant holds a document of {body.collection!r} "
                f"with a text field {body.text_field!r}",
                code="no_training_data",
            )
        current, total = fedavg([(from_wire(u.lora), u.samples) for u in trained])
        r += 1
        holders = {u.shard_id for u in trained}
        pub = Publish(domain=body.domain, round=r, training_samples=total, lora=to_wire(current))
        published = await asyncio.gather(
            *(p.publish(name, pub) for p in participants if p.shard_id in holders)
        )
        results.append(
            RoundResult(
                round=r,
                training_samples=total,
                updates=[
                    {
                        "shard_id": u.shard_id,
                        "samples": u.samples,
                        "first_loss": u.losses[0] if u.losses else None,
                        "last_loss": u.losses[-1] if u.losses else None,
                    }
                    for u in updates
                ],
                published=list(published),
            )
        )
    return results


class Federation:
    """Starts rounds from this shard (``POST /v1/adapters/{name}:federate``): itself plus peers."""

    def __init__(
        self,
        local: LocalParticipant,
        members: Callable[[], list[str]],
        executor: RemoteExecutor,
        timeout_s: float = 1800.0,
    ) -> None:
        self.local = local
        self._members = members
        self.executor = executor
        self.timeout_s = timeout_s
        self._busy: set[str] = set()

    def participants(self, chosen: list[str] | None) -> list[Participant]:
        members = self._members()
        ids = chosen if chosen is not None else members
        unknown = sorted(set(ids) - set(members))
        if unknown:
            raise BadRequest(f"not members of this cluster: {', '.join(unknown)}", code="unknown_shard")
        return [
            self.local if s == self.local.shard_id else RemoteParticipant(s, self.executor, self.timeout_s)
            for s in dict.fromkeys(ids)
        ]

    async def run(self, name: str, body: FederateBody) -> list[RoundResult]:
        check_name(name)
        if name in self._busy:
            raise ThemisError(
                f"a federation of {name!r} is already running", code="federation_busy", status=409
            )
        participants = self.participants(body.participants)
        self._busy.add(name)
        try:
            start = await asyncio.to_thread(self.local.current, name, body.domain)
            return await run_rounds(name, body, participants, start)
        finally:
            self._busy.discard(name)
