"""Spec: answers tied to document versions, against a real shard (real uvicorn, real llama.cpp
model and embedding model, real RocksDB). ``/v1/rag`` cites every source as URN@version with the
model, adapter and seed it generated with, and hands back a ``replay`` object;
``POST /v1/rag:replay`` re-runs it against exactly those versions — bit for bit after the source
changed — and answers 410 ``version_compacted`` once the version is compacted away (this shard
keeps one superseded version per document). AQL's RAG cites versions and replays the same way."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from themis_testing.app_server import Server, free_port

pytestmark = pytest.mark.llm

FACTS = {
    "paris": "Paris is the capital of France.",
    "tokyo": "Tokyo is the capital of Japan.",
    "kiwi": "The kiwi is a flightless bird from New Zealand.",
}
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> Iterator[httpx.Client]:
    pytest.importorskip("llama_cpp")
    from themis_shard.app import create_app
    from themis_shard.llm.settings import LLMSettings
    from themis_shard.settings import Settings

    port = free_port()
    llm = LLMSettings(
        enabled=True,
        n_ctx=1024,
        max_concurrent_requests=4,
        embedding_model="bundled",
        embedding_cache_dir=str(tmp_path_factory.mktemp("emb")),
        adapter_eval_on_load=False,
    )
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("shard"), port=port, llm=llm, document_history_versions=1
    )
    with Server(create_app(settings), port) as server:
        server.wait_ready()
        with httpx.Client(base_url=server.url, timeout=180) as client:
            yield client


def collection(client: httpx.Client, name: str) -> str:
    assert client.put(f"/v1/collections/{name}", json={"embed_field": "text"}).status_code == 200
    docs = [{"key": k, "document": {"text": t}} for k, t in FACTS.items()]
    assert client.post(f"/v1/collections/{name}/documents:batch", json={"documents": docs}).status_code == 200
    return name


def rag(client: httpx.Client, name: str, **extra) -> dict:
    body = {"query": QUESTION, "collection": name, "k": 2, "max_tokens": 8, "temperature": 0, **extra}
    r = client.post("/v1/rag", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def replay(client: httpx.Client, record: dict) -> httpx.Response:
    return client.post("/v1/rag:replay", json=record)


def error(r: httpx.Response) -> tuple[int, str, str]:
    body = r.json()
    assert set(body) == {"error"}, body
    return r.status_code, body["error"]["code"], body["error"]["message"]


def test_an_answer_cites_each_source_at_its_version_with_model_adapter_and_seed(shard) -> None:
    out = rag(shard, collection(shard, "cited"))
    top = out["sources"][0]
    assert top["urn"] == "urn:themis:cited:paris" and top["version"] == 1
    assert isinstance(top["hlc"], int) and isinstance(top["score"], float)
    assert isinstance(out["model"], str) and out["adapter"] is None
    assert isinstance(out["seed"], int)  # none was asked: the shard picked one and says which
    record = out["replay"]
    assert record["sources"] == [{k: s[k] for k in ("urn", "version", "hlc")} for s in out["sources"]]
    assert (record["model"], record["seed"], record["answer"]) == (out["model"], out["seed"], out["answer"])
    assert (record["max_tokens"], record["temperature"]) == (8, 0)


def test_replay_reproduces_a_greedy_answer_bit_for_bit_after_its_source_changed(shard) -> None:
    name = collection(shard, "changing")
    first = rag(shard, name)
    assert first["sources"][0]["urn"] == f"urn:themis:{name}:paris"
    changed = {"text": "Paris is a small village in Texas famous for its Eiffel Tower replica."}
    assert shard.put(f"/v1/collections/{name}/documents/paris", json=changed).status_code == 200

    again = replay(shard, first["replay"])
    assert again.status_code == 200, again.text
    out = again.json()
    assert out["reproduced"] is True and out["answer"] == first["answer"]
    assert [s["version"] for s in out["sources"]] == [s["version"] for s in first["sources"]]
    assert out["seed"] == first["seed"] and out["model"] == first["model"]

    fresh = rag(shard, name)
    paris = next(s for s in fresh["sources"] if s["urn"] == f"urn:themis:{name}:paris")
    assert paris["version"] == 2  # a new answer cites the new version


def test_replay_with_a_seed_reproduces_a_sampled_answer(shard) -> None:
    first = rag(shard, collection(shard, "sampled"), temperature=0.9, seed=1234)
    assert first["seed"] == 1234
    out = replay(shard, first["replay"]).json()
    assert out["reproduced"] is True and out["answer"] == first["answer"]


def test_replay_of_a_compacted_version_is_410_naming_the_urn_and_version(shard) -> None:
    name = collection(shard, "compacted")
    first = rag(shard, name)
    for n in (2, 3):  # one superseded version is kept: writing v3 compacts v1
        doc = {"text": f"Paris is the capital of France (revision {n})."}
        assert shard.put(f"/v1/collections/{name}/documents/paris", json=doc).status_code == 200
    status, code, message = error(replay(shard, first["replay"]))
    assert (status, code) == (410, "version_compacted")
    assert f"urn:themis:{name}:paris@1" in message


def test_a_replay_that_cannot_run_as_recorded_is_refused_by_name(shard) -> None:
    name = collection(shard, "refusals")
    record = rag(shard, name)["replay"]
    cases = [
        ({"model": "no-such-model"}, 404, "model_not_found"),
        ({"adapter": "no-such-adapter"}, 404, "adapter_not_found"),
        ({"sources": [{"urn": f"urn:themis:{name}:paris", "version": 9}]}, 404, "version_not_found"),
        ({"sources": [{"urn": "urn:themis:other:paris", "version": 1}]}, 400, "invalid_urn"),
        ({"sources": [{**record["sources"][0], "hlc": 1}]}, 410, "version_compacted"),
        ({"surprise": True}, 400, "unsupported_parameter"),
    ]
    for change, status, code in cases:
        got = error(replay(shard, {**record, **change}))
        assert got[:2] == (status, code), (change, got)


def test_a_snapshot_answer_reads_every_source_at_one_hybrid_time(shard) -> None:
    out = rag(shard, collection(shard, "snap"), consistency="snapshot")
    assert all(s["hlc"] <= out["snapshot_hlc"] for s in out["sources"])
    assert replay(shard, out["replay"]).json()["reproduced"] is True
    r = shard.post("/v1/rag", json={"query": QUESTION, "collection": "snap", "consistency": "eventual"})
    assert error(r)[:2] == (400, "invalid_request") and "consistency" in error(r)[2]


def test_a_streamed_answer_cites_versions_and_the_seed_first(shard) -> None:
    name = collection(shard, "streamed")
    body = {"query": QUESTION, "collection": name, "k": 1, "max_tokens": 3, "stream": True, "seed": 7}
    with shard.stream("POST", "/v1/rag", json=body) as r:
        assert r.status_code == 200
        first = next(json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: "))
    assert first["seed"] == 7
    assert first["sources"][0]["urn"] == f"urn:themis:{name}:paris" and first["sources"][0]["version"] == 1


def test_aql_rag_cites_versions_and_its_replay_reproduces(shard) -> None:
    name = collection(shard, "aqlrag")
    r = shard.post(
        "/v1/aql",
        json={
            "query": f"RAG @q FROM {name} TOP 2 OPTIONS {{max_tokens: 8, temperature: 0}}",
            "bind_vars": {"q": QUESTION},
        },
    )
    assert r.status_code == 200, r.text
    [answer] = r.json()["result"]
    assert answer["sources"][0] == {**answer["sources"][0], "urn": f"urn:themis:{name}:paris", "version": 1}
    assert isinstance(answer["seed"], int) and "adapter" in answer
    out = replay(shard, answer["replay"]).json()
    assert out["reproduced"] is True and out["answer"] == answer["answer"]


def test_an_owner_answers_a_key_as_it_stood_at_a_hybrid_time(shard) -> None:
    """What a snapshot answer asks a source's owner (``/internal/history``, here unauthenticated:
    a lone shard without TLS or a gossip secret serves its internal routes on the public port)."""
    name = collection(shard, "asof")
    v1 = shard.get(f"/internal/history/{name}/paris", params={"version": 1}).json()["record"]
    assert v1["document"]["text"] == FACTS["paris"]
    assert shard.put(f"/v1/collections/{name}/documents/paris", json={"text": "v2"}).status_code == 200

    def as_of(hlc: int):
        return shard.get(f"/internal/history/{name}/paris", params={"as_of": hlc}).json()["record"]

    assert as_of(v1["hlc"])["version"] == 1
    assert as_of(v1["hlc"] - 1) is None  # not yet written then
    assert as_of(2**62)["document"]["text"] == "v2"
    both = shard.get(f"/internal/history/{name}/paris", params={"version": 1, "as_of": 1})
    assert error(both)[:2] == (400, "invalid_request")


def drafted(client: httpx.Client) -> float:
    """Draft tokens this shard has verified so far (all models, all sources)."""
    lines = client.get("/metrics").text.splitlines()
    return sum(
        float(ln.rsplit(" ", 1)[1]) for ln in lines if ln.startswith("themis_speculation_draft_tokens_total{")
    )


def test_answers_quote_their_passages_speculatively_by_default_and_replay_the_same_way(shard) -> None:
    """Prompt lookup drafts the passages' words; a draft length depends on the answer alone, so
    the speculative answer is the plain one and its replay reproduces it."""
    name = collection(shard, "quoted")
    before = drafted(shard)
    fast = rag(shard, name, max_tokens=24)
    assert drafted(shard) > before
    assert fast["replay"]["speculative"] is True
    out = replay(shard, fast["replay"]).json()
    assert out["reproduced"] is True and out["answer"] == fast["answer"]

    before = drafted(shard)
    plain = rag(shard, name, max_tokens=24, speculative=False)
    assert drafted(shard) == before and plain["replay"]["speculative"] is False
    assert plain["answer"] == fast["answer"]
