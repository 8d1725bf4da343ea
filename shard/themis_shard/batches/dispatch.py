"""One wave of a batch's request lines, scattered over the cluster at the lowest priority.

The lines are split like any ``/v1/infer:batch`` (``InferenceRouting.plan_batch``: domain
ranking, hash owners, shards believed down left out, a fair share each) and gathered by
``cluster.scatter.gather``, which retries a sub-batch once on the next shard when its shard
fails. This shard's part runs on its engine directly; a peer's part goes to that peer's
``/internal/openai/...`` twin, which runs it there and never routes again.

Every generation runs at ``LOWEST_PRIORITY``: the engine's scheduler admits interactive
requests first and preempts batch lines before them when KV pages run short. (Embeddings have
no scheduler; the wave size is their bound.) A line that names its own ``priority`` is refused
by name rather than silently overridden.

Each line ends as an *answer* (the status and body an HTTP client would have got: 2xx or a 4xx
naming the problem) or *transient* (no shard could run it now: retried in a later wave).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..cluster.routing.inference import InferenceRouting
from ..cluster.routing.scatter import Assignment, gather
from ..cluster.transport.remote import PeerError, PeerUnavailable
from ..errors import BadRequest, ThemisError
from ..inference.openai_types import LOWEST_PRIORITY, ChatBody, CompletionBody, EmbeddingsBody
from ..inference.service import InferenceService
from .model import InputLine

#: endpoint → (body model, the peers' twin route)
ROUTES: dict[str, tuple[type[BaseModel], str]] = {
    "/v1/chat/completions": (ChatBody, "/internal/openai/chat/completions"),
    "/v1/completions": (CompletionBody, "/internal/openai/completions"),
    "/v1/embeddings": (EmbeddingsBody, "/internal/openai/embeddings"),
}
#: Statuses that say "not now" rather than "not this request": the line is tried again.
TRANSIENT_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class Answer:
    status_code: int
    body: dict[str, Any]


class Transient(Exception):
    """This shard cannot run the line now (queue full, engine not ready): another may."""


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def prepared(endpoint: str, body: dict[str, Any]) -> tuple[BaseModel, dict[str, Any]]:
    """The validated body at the lowest priority and its wire form, or the 400 the endpoint
    would answer for it."""
    cls, _ = ROUTES[endpoint]
    raw = dict(body)
    if cls is not EmbeddingsBody:
        if "priority" in raw:
            raise BadRequest(
                "priority is set by the Batch API (batch lines run at the lowest priority); remove it",
                code="unsupported_parameter",
            )
        raw["priority"] = LOWEST_PRIORITY
    try:
        parsed = cls.model_validate_json(json.dumps(raw))
    except ValidationError as exc:
        raise BadRequest(validation_message(exc), code="invalid_request") from None
    refusals = getattr(parsed, "refusals", None)
    if refusals is not None:
        refusals()
    return parsed, raw


def routing_key(body: BaseModel) -> str:
    """What the router hashes and matches KV prefixes by: the prompt text."""
    if isinstance(body, ChatBody):
        return "\n".join(str(m.content or "") for m in body.messages)
    if isinstance(body, CompletionBody):
        return body.prompt if isinstance(body.prompt, str) else ""
    return ""


async def _never() -> bool:
    return False


class LineDispatcher:
    """Runs waves of lines: this shard's part on ``svc`` (its engine), the rest through
    ``routing`` (the cluster's inference routing, read when a wave starts)."""

    def __init__(self, svc: InferenceService, routing: Callable[[], InferenceRouting], shard_id: str) -> None:
        self._svc = svc
        self._routing = routing
        self._me = shard_id

    async def _here(self, body: BaseModel) -> dict[str, Any]:
        if isinstance(body, ChatBody):
            return await self._svc.chat_here(body, _never)  # type: ignore[return-value]
        if isinstance(body, CompletionBody):
            return await self._svc.completions_here(body, _never)  # type: ignore[return-value]
        return await self._svc.embeddings_here(body)  # type: ignore[arg-type]

    async def _one(self, shard: str, endpoint: str, line: InputLine, timeout_s: float) -> Answer:
        try:
            body, raw = prepared(endpoint, line.body)
        except ThemisError as exc:
            return Answer(exc.status, error_body(exc.code, exc.message))
        try:
            if shard == self._me:
                return Answer(200, await self._here(body))
            routing = self._routing()
            reply = await routing.executor.request(
                shard,
                "POST",
                ROUTES[endpoint][1],
                json_body=raw,
                idempotent=False,
                retries=0,
                timeout_s=timeout_s,
            )
            return Answer(200, reply)
        except PeerError as exc:
            if exc.status in TRANSIENT_STATUSES:
                raise Transient(f"{shard}: {exc.message}") from exc
            return Answer(exc.status, error_body(exc.code, exc.message))
        except ThemisError as exc:
            if exc.status in TRANSIENT_STATUSES or exc.status >= 500:
                raise Transient(f"{shard}: {exc.message}") from exc
            return Answer(exc.status, error_body(exc.code, exc.message))

    async def run(
        self,
        endpoint: str,
        lines: list[InputLine],
        timeout_s: float,
        on_answer: Callable[[InputLine, Answer], Awaitable[None]],
    ) -> list[InputLine]:
        """Run ``lines`` over the cluster; ``on_answer`` is awaited as each line gets its answer.
        Returns the lines that got none (their shard and its fallback failed: try again later)."""
        routing = self._routing()
        if routing.clustered:
            assignment = routing.plan_batch([self._placement(endpoint, line) for line in lines])
        else:
            assignment = Assignment({self._me: list(range(len(lines)))})

        async def send(shard: str, indices: list[int]) -> list[dict]:
            answers = await asyncio.gather(
                *(self._one(shard, endpoint, lines[i], timeout_s) for i in indices)
            )
            return [{"answer": a} for a in answers]

        async def delivered(index: int, value: dict) -> None:
            if "answer" in value:
                await on_answer(lines[index], value["answer"])

        results, _ = await gather(
            assignment,
            len(lines),
            send,
            timeout_s,
            retryable=(PeerUnavailable, OSError, Transient),
            on_result=delivered,
        )
        return [lines[i] for i, r in enumerate(results) if "answer" not in r]

    def _placement(self, endpoint: str, line: InputLine) -> dict[str, Any]:
        """What ``plan_batch`` places a line by: its prompt and its domain (from ``model``,
        ``adapter`` or ``domain``, as the OpenAI routes route it)."""
        try:
            body, _ = prepared(endpoint, line.body)
        except ThemisError:  # answered 400 wherever it lands
            return {"prompt": "", "domain": None}
        domain = None if isinstance(body, EmbeddingsBody) else self._svc.openai_domain(body)  # type: ignore[arg-type]
        return {"prompt": routing_key(body), "domain": domain}
