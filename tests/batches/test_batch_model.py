"""Spec: the Batch API's rules as pure functions — what an input file must be, how a batch moves
through its statuses, what output and error lines look like, and that batch lines run at the
engine's lowest priority."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from themis_shard.batches import model
from themis_shard.batches.dispatch import prepared
from themis_shard.batches.model import CreateBatch, Status
from themis_shard.errors import BadRequest, Conflict
from themis_shard.inference.openai_types import LOWEST_PRIORITY

CHAT = "/v1/chat/completions"


def line(custom_id="a", url=CHAT, **extra) -> str:
    item = {"custom_id": custom_id, "method": "POST", "url": url, "body": {"messages": []}, **extra}
    return json.dumps(item)


def refusal(text: str, endpoint: str | None = CHAT, max_lines: int = 10) -> str:
    with pytest.raises(BadRequest) as caught:
        model.parse_input(text, endpoint, max_lines)
    assert caught.value.code == "invalid_batch_file"
    return caught.value.message


def test_a_valid_file_gives_its_lines_in_order_skipping_blank_lines() -> None:
    lines = model.parse_input(f"{line('a')}\n\n{line('b')}\n", CHAT, 10)
    assert [(x.index, x.custom_id, x.url) for x in lines] == [(0, "a", CHAT), (1, "b", CHAT)]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{nope", "line 1: not valid JSON"),
        ("[1]", "line 1: each line must be a JSON object"),
        (line(custom_id=""), "line 1: custom_id must be a non-empty string"),
        (f"{line('a')}\n{line('a')}", "line 2: custom_id 'a' repeats line 1"),
        (line(method="GET"), "line 1: method must be 'POST', not 'GET'"),
        (line(url="/v1/embeddings"), "line 1: url '/v1/embeddings' does not match the batch's endpoint"),
        (line(body="hi"), "line 1: body must be a JSON object"),
        (line(extra=1), "line 1: unknown field(s) 'extra'"),
        ("\n\n", "the file holds no request lines"),
    ],
)
def test_a_bad_file_is_refused_naming_the_line_and_the_problem(text: str, says: str) -> None:
    assert says in refusal(text)


def test_a_streamed_line_and_too_many_lines_are_refused() -> None:
    streamed = json.dumps({"custom_id": "a", "method": "POST", "url": CHAT, "body": {"stream": True}})
    assert "body.stream is not supported" in refusal(streamed)
    assert "at most 1 requests" in refusal(f"{line('a')}\n{line('b')}", max_lines=1)


def test_at_upload_any_supported_url_goes_but_one_file_holds_one_url() -> None:
    assert model.parse_input(line(url="/v1/embeddings"), None, 10)[0].url == "/v1/embeddings"
    assert "url '/v1/files' is not supported" in refusal(line(url="/v1/files"), None)
    assert "every line must use one url" in refusal(f"{line('a')}\n{line('b', url='/v1/completions')}", None)


def test_a_create_body_takes_the_24h_window_and_the_three_endpoints_only() -> None:
    ok = CreateBatch(input_file_id="file-1", endpoint=CHAT, completion_window="24h", metadata={"k": "v"})
    assert ok.completion_window == "24h"
    with pytest.raises(ValidationError, match="completion_window '1h' is not supported"):
        CreateBatch(input_file_id="file-1", endpoint=CHAT, completion_window="1h")
    with pytest.raises(ValidationError, match="endpoint '/v1/responses' is not supported"):
        CreateBatch(input_file_id="file-1", endpoint="/v1/responses", completion_window="24h")
    with pytest.raises(ValidationError, match="Extra inputs"):
        CreateBatch(input_file_id="file-1", endpoint=CHAT, completion_window="24h", priority=1)
    with pytest.raises(ValidationError, match="at most 16 metadata pairs"):
        CreateBatch(
            input_file_id="f",
            endpoint=CHAT,
            completion_window="24h",
            metadata={str(i): "" for i in range(17)},
        )


def new(now: int = 1000) -> dict:
    return model.new_batch(
        "batch_1", CreateBatch(input_file_id="f", endpoint=CHAT, completion_window="24h"), now
    )


def test_a_batch_moves_validating_in_progress_finalizing_completed() -> None:
    b = new()
    assert (b["status"], b["expires_at"]) == ("validating", 1000 + 24 * 3600)
    b = model.started(b, 3, 1001)
    assert (b["status"], b["in_progress_at"], b["request_counts"]) == (
        "in_progress",
        1001,
        {"total": 3, "completed": 0, "failed": 0},
    )
    assert model.started(b, 9, 1002) == b  # a resumed runner does not restart it
    b = model.counted(b, 2, 1)
    b = model.finalizing(b, 1003)
    b = model.finished(b, "file-out", "file-err", 1004)
    assert (b["status"], b["completed_at"], b["output_file_id"], b["error_file_id"]) == (
        "completed",
        1004,
        "file-out",
        "file-err",
    )
    assert b["request_counts"] == {"total": 3, "completed": 2, "failed": 1}


def test_cancelling_ends_cancelled_and_an_ended_batch_cannot_be_cancelled() -> None:
    b = model.cancel_requested(model.started(new(), 2, 1001), 1002)
    assert (b["status"], b["cancelling_at"]) == ("cancelling", 1002)
    assert model.cancel_requested(b, 1003) == b
    b = model.finished(b, "file-out", None, 1004)
    assert (b["status"], b["cancelled_at"]) == ("cancelled", 1004)
    done = model.finished(model.finalizing(model.started(new(), 1, 1), 2), None, None, 3)
    with pytest.raises(Conflict, match="is completed and cannot be cancelled"):
        model.cancel_requested(done, 4)


def test_the_window_closes_24h_after_creation() -> None:
    b = new(now=1000)
    assert not model.is_expired(b, 1000 + 24 * 3600 - 1)
    assert model.is_expired(b, 1000 + 24 * 3600)
    assert model.expired(b, None, "file-err", 90000)["status"] == Status.expired


def test_output_and_error_lines_have_openais_shape() -> None:
    ok = model.output_line("batch_req_1", "a", 200, "req_1", {"choices": []})
    assert ok == {
        "id": "batch_req_1",
        "custom_id": "a",
        "response": {"status_code": 200, "request_id": "req_1", "body": {"choices": []}},
        "error": None,
    }
    assert model.is_success(ok)
    assert not model.is_success(model.output_line("r", "b", 400, "req", {"error": {}}))
    late = model.error_line("r", "c", "batch_expired", "too late")
    assert late["response"] is None and late["error"]["code"] == "batch_expired"
    assert not model.is_success(late)


def test_usage_sums_the_tokens_of_every_answer() -> None:
    def answered(prompt: int, completion: int, cached: int = 0) -> dict:
        usage = {"prompt_tokens": prompt, "completion_tokens": completion}
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return model.output_line("r", "x", 200, "req", {"usage": usage})

    lines = [answered(10, 4, cached=8), answered(5, 2), model.error_line("r", "y", "batch_expired", "late")]
    assert model.usage_of(lines) == {
        "input_tokens": 15,
        "input_tokens_details": {"cached_tokens": 8},
        "output_tokens": 6,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 21,
    }


def test_lists_page_after_an_id() -> None:
    items = [{"id": f"b{i}"} for i in range(5)]
    first = model.page(items, None, 2)
    assert ([x["id"] for x in first["data"]], first["has_more"], first["last_id"]) == (
        ["b0", "b1"],
        True,
        "b1",
    )
    rest = model.page(items, "b3", 2)
    assert ([x["id"] for x in rest["data"]], rest["has_more"]) == (["b4"], False)


def test_batch_lines_run_at_the_lowest_priority_and_may_not_name_their_own() -> None:
    body, raw = prepared(CHAT, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert body.priority == raw["priority"] == LOWEST_PRIORITY
    with pytest.raises(BadRequest, match="priority is set by the Batch API"):
        prepared(CHAT, {"messages": [], "priority": 5})
    with pytest.raises(BadRequest, match="temperature"):
        prepared(CHAT, {"messages": [], "temperature": 5})
    _, raw = prepared("/v1/embeddings", {"input": "x"})
    assert "priority" not in raw  # the embedder has no scheduler
