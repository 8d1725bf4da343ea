"""``themis demo``: load the corpus into a running cluster (embedded on write), ask one RAG
question (``POST /v1/rag``) and run one AQL query, printing the answers and their sources.

It talks to the cluster through ``themis_client`` only (the public REST API), with the API key
when the cluster has keys on.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from themis_client import ThemisClient, ThemisError

from .corpus import load_corpus

DEFAULT_QUESTION = "Why is the sky blue?"
#: The AQL query the demo runs: the question's nearest paragraphs within the best source's topic.
AQL_QUERY = (
    "FOR p IN @@c FILTER p.topic == @topic SORT SIMILARITY(p.embedding, @v) DESC LIMIT 3 "
    "RETURN {urn: p._urn, title: p.title}"
)
BATCH = 64


def load(themis: ThemisClient, collection: str) -> int:
    """Declare the collection (embedded from ``text``) and write every paragraph; returns the count."""
    corpus = load_corpus()
    themis.declare_collection(collection, embed_field="text")
    for start in range(0, len(corpus), BATCH):
        themis.batch(collection, {p.key: p.document() for p in corpus[start : start + BATCH]})
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
    """The demo's report; a refusal exits naming the request (``PUT /v1/... → 401 code: ...``)."""
    try:
        with ThemisClient(url, api_key=api_key, verify=verify, timeout=timeout_s) as themis:
            return _run(themis, question, collection, max_tokens, skip_load)
    except ThemisError as exc:
        raise SystemExit(f"{exc.request} → {exc.status} {exc.code}: {exc.message}") from exc


def _run(themis: ThemisClient, question: str, collection: str, max_tokens: int, skip_load: bool) -> dict:
    loaded = 0 if skip_load else load(themis, collection)
    rag = themis.rag(question, collection, k=3, max_tokens=max_tokens, temperature=0)
    docs = {s.urn: themis.get(collection, s.urn.rsplit(":", 1)[1]).document for s in rag.sources}
    best = max(rag.sources, key=lambda s: s.score or 0.0)  # sources come in prompt (URN) order
    topic = docs[best.urn]["topic"]
    [vector] = themis.embed([question]).embeddings
    aql = themis.aql(AQL_QUERY, {"@c": collection, "topic": topic, "v": vector})
    return {
        "loaded": loaded,
        "question": question,
        "rag": {
            "answer": rag.answer,
            "shard_id": rag.shard_id,
            "sources": [{**s.model_dump(), "title": docs[s.urn]["title"]} for s in rag.sources],
        },
        "aql": {"query": AQL_QUERY, "topic": topic, "result": aql.result},
    }


def render(report: dict[str, Any], out: TextIO = sys.stdout) -> None:
    if report["loaded"]:
        print(
            f"loaded {report['loaded']} paragraphs (CC0) into collection 'demo', embedded on write", file=out
        )
    rag = report["rag"]
    print(f"\nRAG  POST /v1/rag  {report['question']!r}  (generated on {rag['shard_id']})", file=out)
    print(f"answer: {(rag['answer'] or '').strip()}", file=out)
    print("sources (in prompt order, with their scores):", file=out)
    for s in rag["sources"]:
        print(f"  {s['score']:.3f}  {s['urn']}  {s['title']}", file=out)
    aql = report["aql"]
    print(f"\nAQL  {aql['query']}\n     (@topic = {aql['topic']!r}, @v = the question's embedding)", file=out)
    for row in aql["result"]:
        print(f"  {json.dumps(row, ensure_ascii=False)}", file=out)
