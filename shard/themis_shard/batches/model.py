"""The Batch API's objects and rules as pure functions: input-file validation, the batch state
machine, and OpenAI's output and error line formats.

A batch moves ``validating → in_progress → finalizing → completed``; it may end ``failed`` (its
input could not be read), ``expired`` (the 24 h window closed before every line ran) or, once a
client asks, ``cancelling → cancelled``. Every transition is a function from the stored batch
object (a dict, OpenAI's shape, which is also what is stored) to the next one, so the runner, the
routes and the tests share one definition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..errors import BadRequest, Conflict

#: The endpoints a batch may target (each line's ``url`` must be the batch's).
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
#: ``completion_window`` → seconds. OpenAI offers only 24 h; so does Themis.
COMPLETION_WINDOWS = {"24h": 24 * 3600}
#: The purposes a file may be uploaded with, and the one Themis writes results under.
UPLOAD_PURPOSES = ("batch",)
OUTPUT_PURPOSE = "batch_output"
#: OpenAI's metadata limits.
MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512


class Status(StrEnum):
    validating = "validating"
    in_progress = "in_progress"
    finalizing = "finalizing"
    completed = "completed"
    failed = "failed"
    expired = "expired"
    cancelling = "cancelling"
    cancelled = "cancelled"


#: Statuses a runner still has work in.
ACTIVE = frozenset({Status.validating, Status.in_progress, Status.finalizing, Status.cancelling})


class CreateBatch(BaseModel):
    """``POST /v1/batches``; any other field is refused by name."""

    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(min_length=1, max_length=200)
    #: The schema names the accepted values; the validators refuse any other by name.
    endpoint: str = Field(json_schema_extra={"enum": list(ENDPOINTS)})
    completion_window: str = Field(json_schema_extra={"enum": list(COMPLETION_WINDOWS)})
    metadata: dict[str, str] | None = Field(
        None,
        json_schema_extra={
            "maxProperties": MAX_METADATA_PAIRS,
            "propertyNames": {"maxLength": MAX_METADATA_KEY},
            "additionalProperties": {"type": "string", "maxLength": MAX_METADATA_VALUE},
        },
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, v: str) -> str:
        if v not in ENDPOINTS:
            raise ValueError(f"endpoint {v!r} is not supported: use one of {', '.join(ENDPOINTS)}")
        return v

    @field_validator("completion_window")
    @classmethod
    def _window(cls, v: str) -> str:
        if v not in COMPLETION_WINDOWS:
            raise ValueError(f"completion_window {v!r} is not supported: only '24h' is")
        return v

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is None:
            return v
        if len(v) > MAX_METADATA_PAIRS:
            raise ValueError(f"at most {MAX_METADATA_PAIRS} metadata pairs")
        for key, value in v.items():
            if len(key) > MAX_METADATA_KEY or len(value) > MAX_METADATA_VALUE:
                raise ValueError(
                    f"metadata keys are at most {MAX_METADATA_KEY} characters and values {MAX_METADATA_VALUE}"
                )
        return v


@dataclass(frozen=True)
class InputLine:
    index: int
    custom_id: str
    url: str
    body: dict[str, Any]


def invalid_file(line: int | None, message: str) -> BadRequest:
    where = f"line {line}: " if line is not None else ""
    return BadRequest(f"invalid batch input file: {where}{message}", code="invalid_batch_file")


def parse_input(text: str, endpoint: str | None, max_lines: int) -> list[InputLine]:
    """The request lines of a JSONL input file, or the 400 naming the first bad line (1-based).
    ``endpoint`` None checks each ``url`` is a supported endpoint (at upload); given, that every
    line targets it (at batch creation). Blank lines are skipped, as OpenAI does."""
    out: list[InputLine] = []
    seen: dict[str, int] = {}
    urls: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
        except ValueError as exc:
            raise invalid_file(number, f"not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise invalid_file(number, "each line must be a JSON object")
        extra = sorted(set(item) - {"custom_id", "method", "url", "body"})
        if extra:
            raise invalid_file(number, f"unknown field(s) {', '.join(map(repr, extra))}")
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not custom_id:
            raise invalid_file(number, "custom_id must be a non-empty string")
        if custom_id in seen:
            raise invalid_file(number, f"custom_id {custom_id!r} repeats line {seen[custom_id]}")
        seen[custom_id] = number
        if item.get("method") != "POST":
            raise invalid_file(number, f"method must be 'POST', not {item.get('method')!r}")
        url = item.get("url")
        if endpoint is not None and url != endpoint:
            raise invalid_file(number, f"url {url!r} does not match the batch's endpoint {endpoint!r}")
        if url not in ENDPOINTS:
            raise invalid_file(number, f"url {url!r} is not supported: use one of {', '.join(ENDPOINTS)}")
        urls.add(url)
        if len(urls) > 1:
            raise invalid_file(number, f"every line must use one url; this one is {url!r}")
        body = item.get("body")
        if not isinstance(body, dict):
            raise invalid_file(number, "body must be a JSON object (the request to send)")
        if body.get("stream"):
            raise invalid_file(number, "body.stream is not supported in a batch")
        if len(out) >= max_lines:
            raise invalid_file(number, f"a batch holds at most {max_lines} requests")
        out.append(InputLine(len(out), custom_id, url, body))
    if not out:
        raise invalid_file(None, "the file holds no request lines")
    return out


# -- objects ---------------------------------------------------------------------------------
def file_object(file_id: str, size: int, created_at: int, filename: str, purpose: str) -> dict[str, Any]:
    return {
        "id": file_id,
        "object": "file",
        "bytes": size,
        "created_at": created_at,
        "filename": filename,
        "purpose": purpose,
        "status": "processed",
        "status_details": None,
    }


def new_batch(batch_id: str, req: CreateBatch, now: int) -> dict[str, Any]:
    return {
        "id": batch_id,
        "object": "batch",
        "endpoint": req.endpoint,
        "errors": None,
        "input_file_id": req.input_file_id,
        "completion_window": req.completion_window,
        "status": Status.validating.value,
        "output_file_id": None,
        "error_file_id": None,
        "created_at": now,
        "in_progress_at": None,
        "expires_at": now + COMPLETION_WINDOWS[req.completion_window],
        "finalizing_at": None,
        "completed_at": None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None,
        "cancelled_at": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "usage": None,
        "metadata": req.metadata,
    }


def status_of(batch: dict[str, Any]) -> Status:
    return Status(batch["status"])


# -- transitions -----------------------------------------------------------------------------
def started(batch: dict[str, Any], total: int, now: int) -> dict[str, Any]:
    """validating → in_progress, with the number of lines."""
    if status_of(batch) is not Status.validating:
        return batch
    counts = {"total": total, "completed": 0, "failed": 0}
    return {**batch, "status": Status.in_progress.value, "in_progress_at": now, "request_counts": counts}


def counted(batch: dict[str, Any], completed: int, failed: int) -> dict[str, Any]:
    counts = {**batch["request_counts"], "completed": completed, "failed": failed}
    return {**batch, "request_counts": counts}


def finalizing(batch: dict[str, Any], now: int) -> dict[str, Any]:
    if status_of(batch) is not Status.in_progress:
        return batch
    return {**batch, "status": Status.finalizing.value, "finalizing_at": now}


def finished(
    batch: dict[str, Any], output_file_id: str | None, error_file_id: str | None, now: int
) -> dict[str, Any]:
    """The end a runner writes once the files exist: completed, or cancelled / expired when
    that is what ended it."""
    status = status_of(batch)
    end = {
        Status.finalizing: (Status.completed, "completed_at"),
        Status.in_progress: (Status.completed, "completed_at"),
        Status.cancelling: (Status.cancelled, "cancelled_at"),
    }.get(status)
    if end is None:
        return batch
    files = {"output_file_id": output_file_id, "error_file_id": error_file_id}
    return {**batch, **files, "status": end[0].value, end[1]: now}


def expired(
    batch: dict[str, Any], output_file_id: str | None, error_file_id: str | None, now: int
) -> dict[str, Any]:
    files = {"output_file_id": output_file_id, "error_file_id": error_file_id}
    return {**batch, **files, "status": Status.expired.value, "expired_at": now}


def failed(batch: dict[str, Any], code: str, message: str, now: int) -> dict[str, Any]:
    errors = {"object": "list", "data": [{"code": code, "message": message, "param": None, "line": None}]}
    return {**batch, "status": Status.failed.value, "failed_at": now, "errors": errors}


def cancel_requested(batch: dict[str, Any], now: int) -> dict[str, Any]:
    """What ``POST /v1/batches/{id}/cancel`` writes: cancelling (the runner then stops starting
    lines and writes what finished); again on a cancelling batch is a no-op; an ended batch is 409."""
    status = status_of(batch)
    if status in (Status.cancelling, Status.cancelled):
        return batch
    if status not in (Status.validating, Status.in_progress):
        raise Conflict(
            f"batch {batch['id']} is {status.value} and cannot be cancelled", code="batch_not_cancellable"
        )
    return {**batch, "status": Status.cancelling.value, "cancelling_at": now}


def is_expired(batch: dict[str, Any], now: float) -> bool:
    return now >= batch["expires_at"]


# -- result lines ----------------------------------------------------------------------------
def output_line(
    index_id: str, custom_id: str, status_code: int, request_id: str, body: dict[str, Any]
) -> dict[str, Any]:
    """One line of an output or error file for a request that got an answer."""
    response = {"status_code": status_code, "request_id": request_id, "body": body}
    return {"id": index_id, "custom_id": custom_id, "response": response, "error": None}


def error_line(index_id: str, custom_id: str, code: str, message: str) -> dict[str, Any]:
    """One line of an error file for a request that got no answer (expired, failed to run)."""
    return {
        "id": index_id,
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }


def is_success(line: dict[str, Any]) -> bool:
    response = line.get("response")
    return bool(response) and 200 <= response["status_code"] < 300


def usage_of(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The batch's ``usage``: the tokens of every answered request, summed (OpenAI's shape)."""
    prompt = completion = cached = 0
    for line in lines:
        usage = ((line.get("response") or {}).get("body") or {}).get("usage") or {}
        prompt += usage.get("prompt_tokens", 0)
        completion += usage.get("completion_tokens", 0)
        cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()


def page(items: list[dict[str, Any]], after: str | None, limit: int) -> dict[str, Any]:
    """OpenAI's list object over ``items`` (already in order): those after the id ``after``."""
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    data = items[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(items) > limit,
    }
