"""Spec: the OpenAI Batch API through the official ``openai`` client against real shards.

``files.create`` → ``batches.create`` → ``batches.retrieve`` until it ends → ``files.content``:
every ``custom_id`` of the input comes back exactly once, with the real model's answer, lines
scattered over the cluster (``system_fingerprint`` names the shard that ran each one); a line
the endpoint would refuse lands in the error file with that 400. A bad input file, a url that
is not the batch's endpoint, an unknown file and any window but ``24h`` are refused by name
when they are sent. A cancelled batch ends ``cancelled`` with only what finished. A batch whose
coordinating shard is killed (``kill -9``) mid-run resumes when it is back, or, with failover,
on the shard that becomes the primary of its document; it completes with every line answered
exactly once: the lines answered before the kill keep their answer.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from themis_core.plan import FailoverSettings
from themis_shard.batches import model
from themis_shard.batches.store import BATCHES, LINES
from themis_shard.cluster.placement.owners import Topology
from themis_shard.cluster.replication.fencing import primary

from .conftest import Authority, LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.llm, pytest.mark.slow]

openai = pytest.importorskip("openai")

#: Two lines in flight at once: a batch of a few lines is still running when the tests act.
ENV = {"THEMIS_BATCH_CONCURRENCY": "2", "THEMIS_BATCH_POLL_INTERVAL_S": "0.3"}
CHAT = "/v1/chat/completions"
ENDED = ("completed", "failed", "expired", "cancelled")
BOUND_S = 300.0


def client(url: str):
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=60)


def chat_line(custom_id: str, content: str, **body) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0, **body}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def jsonl(lines: list[dict]) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()


def upload(c, lines: list[dict]):
    return c.files.create(file=("input.jsonl", jsonl(lines)), purpose="batch")


def wait_for(c, batch_id: str, statuses=ENDED):
    started = time.monotonic()
    while True:
        try:
            batch = c.batches.retrieve(batch_id)
            if batch.status in statuses:
                return batch
        except (openai.APIConnectionError, openai.InternalServerError):  # a shard restarting
            pass
        assert time.monotonic() - started < BOUND_S, f"batch {batch_id} did not reach {statuses}"
        time.sleep(0.3)


def lines_of(c, file_id: str | None) -> list[dict]:
    if file_id is None:
        return []
    return [json.loads(x) for x in c.files.content(file_id).text.splitlines() if x.strip()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("batches"), 2, llm=True, env=ENV)
    cluster.start_all()
    yield cluster
    cluster.stop()


def test_a_batch_round_trip_answers_every_custom_id_once_across_the_cluster(cluster) -> None:
    c = client(cluster.url("shard-0"))
    lines = [chat_line(f"q{i}", f"Count to {i}") for i in range(4)]
    lines.append(chat_line("too-hot", "Hi", temperature=5))  # the endpoint answers 400
    file = upload(c, lines)
    assert (file.purpose, file.bytes) == ("batch", len(jsonl(lines)))

    batch = c.batches.create(
        input_file_id=file.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "spec"},
    )
    assert batch.status == "validating" and batch.metadata == {"job": "spec"}
    assert batch.expires_at - batch.created_at == 24 * 3600

    done = wait_for(client(cluster.url("shard-1")), batch.id)  # any shard answers for it
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (5, 4, 1)
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    assert done.usage.output_tokens >= 4 and done.usage.total_tokens > done.usage.output_tokens

    out = lines_of(c, done.output_file_id)
    assert sorted(x["custom_id"] for x in out) == ["q0", "q1", "q2", "q3"]
    for x in out:
        assert x["error"] is None and x["response"]["status_code"] == 200
        body = x["response"]["body"]
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
        assert body["usage"]["completion_tokens"] >= 1
    assert {x["response"]["body"]["system_fingerprint"] for x in out} == {"themis:shard-0", "themis:shard-1"}

    (err,) = lines_of(c, done.error_file_id)
    assert err["custom_id"] == "too-hot" and err["response"]["status_code"] == 400
    assert "temperature" in err["response"]["body"]["error"]["message"]

    assert batch.id in [b.id for b in c.batches.list(limit=100)]
    with httpx.Client(base_url=cluster.url("shard-0"), timeout=30) as http:  # the files hold them now
        assert http.get(f"/v1/collections/{LINES}/documents/{batch.id}.0").status_code == 404
    assert c.files.retrieve(done.output_file_id).purpose == "batch_output"


def test_an_embeddings_batch_returns_vectors(cluster) -> None:
    c = client(cluster.url("shard-1"))
    lines = [
        {"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings", "body": {"input": text}}
        for i, text in enumerate(["red apples", "green pears"])
    ]
    batch = c.batches.create(
        input_file_id=upload(c, lines).id, endpoint="/v1/embeddings", completion_window="24h"
    )
    done = wait_for(c, batch.id)
    assert done.status == "completed" and done.request_counts.completed == 2
    for x in lines_of(c, done.output_file_id):
        assert len(x["response"]["body"]["data"][0]["embedding"]) > 0


def test_bad_input_is_refused_by_name_when_sent(cluster) -> None:
    c = client(cluster.url("shard-0"))
    with pytest.raises(openai.BadRequestError, match=r"line 2: not valid JSON"):
        c.files.create(file=("bad.jsonl", jsonl([chat_line("a", "x")]) + b"\n{oops"), purpose="batch")
    with pytest.raises(openai.BadRequestError, match=r"custom_id 'a' repeats line 1"):
        upload(c, [chat_line("a", "x"), chat_line("a", "y")])
    with pytest.raises(openai.BadRequestError, match=r"purpose 'fine-tune' is not supported"):
        c.files.create(file=("x.jsonl", jsonl([chat_line("a", "x")])), purpose="fine-tune")

    file = upload(c, [chat_line("a", "x")])
    with pytest.raises(
        openai.BadRequestError, match=r"does not match the batch's endpoint '/v1/completions'"
    ):
        c.batches.create(input_file_id=file.id, endpoint="/v1/completions", completion_window="24h")
    with pytest.raises(openai.NotFoundError, match=r"file 'file-missing' does not exist"):
        c.batches.create(
            input_file_id="file-missing", endpoint="/v1/chat/completions", completion_window="24h"
        )
    with pytest.raises(openai.BadRequestError, match=r"completion_window '1h' is not supported"):
        c.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="1h")  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError, match=r"batch 'batch_missing' does not exist"):
        c.batches.retrieve("batch_missing")

    assert c.files.delete(file.id).deleted
    with pytest.raises(openai.NotFoundError):
        c.files.retrieve(file.id)


def test_a_cancelled_batch_ends_cancelled_with_only_what_finished(cluster) -> None:
    c = client(cluster.url("shard-0"))
    lines = [chat_line(f"c{i}", f"Tell a story number {i}", max_tokens=24) for i in range(10)]
    batch = c.batches.create(
        input_file_id=upload(c, lines).id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    cancelling = c.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at
    done = wait_for(c, batch.id)
    assert done.status == "cancelled" and done.cancelled_at
    assert done.request_counts.completed < 10
    finished = [x["custom_id"] for x in lines_of(c, done.output_file_id)]
    assert len(finished) == done.request_counts.completed and len(set(finished)) == len(finished)
    assert c.batches.cancel(batch.id).status == "cancelled"  # again: nothing changes

    one = c.batches.create(
        input_file_id=upload(c, [chat_line("z", "x")]).id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
    )
    assert wait_for(c, one.id).status == "completed"
    with pytest.raises(openai.ConflictError, match="is completed and cannot be cancelled"):
        c.batches.cancel(one.id)


def test_a_batch_whose_window_closed_ends_expired_with_its_lines_in_the_error_file(cluster) -> None:
    """The 24 h window is not waited out: the batch is stored as the create route stores it, with
    its ``expires_at`` already past (a batch document is an ordinary document)."""
    c = client(cluster.url("shard-0"))
    file = upload(c, [chat_line("late-1", "x"), chat_line("late-2", "y")])
    now = int(time.time())
    batch = model.new_batch(
        "batch_expired1",
        model.CreateBatch(input_file_id=file.id, endpoint=CHAT, completion_window="24h"),
        now,
    )
    batch["expires_at"] = now - 1
    with httpx.Client(base_url=cluster.url("shard-0"), timeout=30) as http:
        http.put(f"/v1/collections/{BATCHES}/documents/{batch['id']}", json=batch).raise_for_status()
    done = wait_for(c, batch["id"])
    assert done.status == "expired" and done.expired_at and done.output_file_id is None
    errors = lines_of(c, done.error_file_id)
    assert sorted(x["custom_id"] for x in errors) == ["late-1", "late-2"]
    assert {x["error"]["code"] for x in errors} == {"batch_expired"}
    assert (done.request_counts.total, done.request_counts.failed) == (2, 2)


def eventually(call, bound: float = BOUND_S):
    """``call()`` until no shard answers 503 (a failover cluster grants its first leases)."""
    started = time.monotonic()
    while True:
        try:
            return call()
        except (openai.InternalServerError, openai.APIConnectionError):
            assert time.monotonic() - started < bound, "still unavailable"
            time.sleep(0.3)


def kill_mid_batch(cluster: LocalCluster, *, restart: bool) -> None:
    """A batch of 8 lines; once 2 are answered its coordinator is killed (and restarted, or left
    dead for the failover to move the batch); it completes, each line answered once, and the
    lines answered before the kill keep the answer they had."""
    c0, c1 = client(cluster.url("shard-0")), client(cluster.url("shard-1"))
    lines = [chat_line(f"k{i}", f"Name a colour, {i}", max_tokens=12) for i in range(8)]
    file = eventually(lambda: upload(c0, lines))
    batch = eventually(
        lambda: c0.batches.create(input_file_id=file.id, endpoint=CHAT, completion_window="24h")
    )
    coordinator = primary(Topology.of(cluster.plan, "shard-0"), BATCHES, batch.id)
    survivor = c1 if coordinator == "shard-0" else c0
    entry = cluster.url("shard-1" if coordinator == "shard-0" else "shard-0")

    started = time.monotonic()
    while eventually(lambda: survivor.batches.retrieve(batch.id)).request_counts.completed < 2:
        assert time.monotonic() - started < BOUND_S, "the batch never got going"
        time.sleep(0.2)
    answered_before = {}  # custom_id → the answer's id, for every line answered before the kill
    with httpx.Client(base_url=entry, timeout=30) as http:
        for i in range(len(lines)):
            r = http.get(f"/v1/collections/{LINES}/documents/{batch.id}.{i}")
            if r.status_code == 200:
                answered_before[r.json()["document"]["custom_id"]] = r.json()["document"]["id"]
    cluster.kill(coordinator)  # kill -9, mid-batch
    assert len(answered_before) < len(lines), "the batch ended before the kill: make it longer"
    if restart:
        cluster.start(coordinator)

    done = wait_for(survivor, batch.id)
    assert done.status == "completed", done
    assert (done.request_counts.total, done.request_counts.completed) == (8, 8)
    out = lines_of(survivor, done.output_file_id)
    assert sorted(x["custom_id"] for x in out) == sorted(f"k{i}" for i in range(8))  # each once
    assert all(x["response"]["body"]["choices"][0]["message"]["content"] for x in out)
    ids = {x["custom_id"]: x["id"] for x in out}
    assert {k: ids[k] for k in answered_before} == answered_before  # not run again


def test_a_batch_resumes_after_a_kill_9_and_restart_of_its_coordinator(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, 2, llm=True, env=ENV)
    cluster.start_all()
    try:
        kill_mid_batch(cluster, restart=True)
    finally:
        cluster.stop()


def test_a_batch_moves_to_the_new_primary_when_its_coordinator_dies_for_good(tmp_path) -> None:
    cluster = LocalCluster(tmp_path, 2, llm=True, env=ENV, failover=FailoverSettings())
    cluster.start_all()
    try:
        with Authority.of(cluster):
            kill_mid_batch(cluster, restart=False)
    finally:
        cluster.stop()
