"""``themis demo``: load the corpus into a running cluster (embedded on write), ask one RAG
question (``POST /v1/rag``) and run one AQL query, printing the answers and their sources.

It uses only the public REST API, with the API key when the cluster has keys on.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

import httpx

from ..auth.keys import bearer_headers
from .corpus import load_corpus

DEFAULT_QUESTION = "Why is the sky blue?"
#: The AQL query the demo runs: the question's nearest paragraphs within the best source's topic.
AQL_QUERY = (
    "FOR p IN @@c FILTER p.topic == @topic SORT SIMILARITY(p.embedding, @v) DESC LIMIT 3 "
    "RETURN {urn: p._urn, title: p.title}"
)
BATCH = 64


def _ok(response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            err = response.json()["error"]
            detail = f"{err['code']}: {err['message']}"
        except (ValueError, KeyError, TypeError):
            detail = response.text[:200]
        raise SystemExit(
            f"{response.request.method} {response.request.url.path} → {response.status_code} {detail}"
        )
    return response.json()


def load(client: httpx.Client, collection: str) -> int:
    """Declare the collection (embedded from ``text``) and write every paragraph; returns the count."""
    corpus = load_corpus()
    _ok(client.put(f"/v1/collections/{collection}", json={"embed_field": "text"}))
    for start in range(0, len(corpus), BATCH):
        docs = [{"key": p.key, "document": p.document()} for p in corpus[start : start + BATCH]]
        _ok(client.post(f"/v1/collections/{collection}/documents:batch", json={"documents": docs}))
    return len(corpus)


def run_demo(
    url: str,
    *,
    api_key: str | None = None,
    verify: Any = True,
    question: str = DEFAULT_QUESTION,
    collection: str = "demo",
    max_tokens: int = 48,
    skip_load: bool = False,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    with httpx.Client(
        base_url=url, headers=bearer_headers(api_key), verify=verify, timeout=timeout_s
    ) as client:
        loaded = 0 if skip_load else load(client, collection)
        rag = _ok(
            client.post(
                "/v1/rag",
                json={
                    "query": question,
                    "collection": collection,
                    "k": 3,
                    "max_tokens": max_tokens,
                    "temperature": 0,
                },
            )
        )
        docs = {
            source["urn"]: _ok(
                client.get(f"/v1/collections/{collection}/documents/{source['urn'].rsplit(':', 1)[1]}")
            )["document"]
            for source in rag["sources"]
        }
        topic = docs[rag["sources"][0]["urn"]]["topic"]
        [vector] = _ok(client.post("/v1/embed", json={"texts": [question]}))["embeddings"]
        aql = _ok(
            client.post(
                "/v1/aql",
                json={"query": AQL_QUERY, "bind_vars": {"@c": collection, "topic": topic, "v": vector}},
            )
        )
    return {
        "loaded": loaded,
        "question": question,
        "rag": {
            "answer": rag["answer"],
            "shard_id": rag.get("shard_id"),
            "sources": [{**s, "title": docs[s["urn"]]["title"]} for s in rag["sources"]],
        },
        "aql": {"query": AQL_QUERY, "topic": topic, "result": aql["result"]},
    }


def render(report: dict[str, Any], out: TextIO = sys.stdout) -> None:
    if report["loaded"]:
        print(
            f"loaded {report['loaded']} paragraphs (CC0) into collection 'demo', embedded on write", file=out
        )
    rag = report["rag"]
    print(f"\nRAG  POST /v1/rag  {report['question']!r}  (generated on {rag['shard_id']})", file=out)
    print(f"answer: {(rag['answer'] or '').strip()}", file=out)
    print("sources:", file=out)
    for s in rag["sources"]:
        print(f"  {s['score']:.3f}  {s['urn']}  {s['title']}", file=out)
    aql = report["aql"]
    print(f"\nAQL  {aql['query']}\n     (@topic = {aql['topic']!r}, @v = the question's embedding)", file=out)
    for row in aql["result"]:
        print(f"  {json.dumps(row, ensure_ascii=False)}", file=out)
