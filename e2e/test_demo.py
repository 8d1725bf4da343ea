"""Spec: the quickstart — `themis demo` against a real local cluster (real shard processes, the
real model and embedding model, API keys on) loads the CC0 corpus with embeddings, answers one
RAG question and runs one AQL query, and every source it prints is a paragraph of the corpus.
On the same cluster: /v1/rag cites a passage another shard holds (JSON and SSE), and the two
engines of this one machine batch together."""

from __future__ import annotations

import json
import subprocess

import pytest
from themis_client import ThemisClient
from themis_core.plan import ClusterPlan
from themis_shard.cluster.placement.owners import Topology
from themis_shard.demo.corpus import load_corpus

from .conftest import run_themis

pytestmark = [pytest.mark.e2e, pytest.mark.llm, pytest.mark.slow]


def themis(*args: str, cwd, timeout: float = 900) -> subprocess.CompletedProcess:
    return run_themis(*args, cwd=cwd, timeout=timeout)


def test_demo_loads_the_corpus_and_answers_from_it(tmp_path) -> None:
    pytest.importorskip("llama_cpp")
    up = themis(
        "up",
        "--shards",
        "2",
        "--raid-mode",
        "raid0",
        "--base-port",
        "0",
        "--auth",
        "--timeout",
        "600",
        cwd=tmp_path,
    )
    try:
        assert up.returncode == 0, up.stderr
        demo = themis("demo", "--json", "--max-tokens", "8", cwd=tmp_path)
        assert demo.returncode == 0, demo.stderr
        report = json.loads(demo.stdout)
        corpus = {f"urn:themis:demo:{p.key}": p for p in load_corpus()}
        assert report["loaded"] == len(corpus) >= 200
        sources = report["rag"]["sources"]
        assert len(sources) == 3 and all(s["urn"] in corpus for s in sources)
        best = max(sources, key=lambda s: s["score"])  # sources come in prompt (URN) order
        assert best["urn"] == "urn:themis:demo:physics-why-the-sky-is-blue"
        assert isinstance(report["rag"]["answer"], str)
        rows = report["aql"]["result"]
        assert report["aql"]["topic"] == "physics" and 1 <= len(rows) <= 3
        assert all(r["urn"] in corpus and corpus[r["urn"]].topic == "physics" for r in rows)
        assert rows[0]["urn"] == best["urn"]

        text = themis("demo", "--skip-load", "--max-tokens", "8", cwd=tmp_path)  # the human-readable form
        assert text.returncode == 0, text.stderr
        assert "urn:themis:demo:physics-why-the-sky-is-blue" in text.stdout and "answer:" in text.stdout

        a_passage_held_by_another_shard_is_cited_at_its_version(tmp_path)
        engines_sharing_one_machine_batch_on_one(tmp_path)
    finally:
        themis("down", cwd=tmp_path, timeout=120)


def a_passage_held_by_another_shard_is_cited_at_its_version(root) -> None:
    """raid0: one owner per key. Asked on shard-0 about a paragraph only shard-1 holds, the answer
    cites it (read from shard-1), streamed or not; the one inference pipeline places the
    generation (one cost model: a KV prefix of the prompt held elsewhere, this machine's
    batching engine, load)."""
    plan = ClusterPlan.load(root / ".themis" / "plan.json")
    topo = Topology.of(plan, "shard-0")
    url = {m.shard_id: m.url for m in plan.members}
    para = next(p for p in load_corpus() if topo.owners("demo", p.key) == ["shard-1"])
    key = (root / ".themis" / "auth" / "client.key").read_text().strip()
    question = {"k": 1, "max_tokens": 4, "temperature": 0}
    with ThemisClient(url["shard-0"], api_key=key, timeout=300) as themis_db:
        out = themis_db.rag(para.text, "demo", **question)
        assert [(s.urn, s.version) for s in out.sources] == [(f"urn:themis:demo:{para.key}", 1)]
        assert out.shard_id in url
        with themis_db.stream_rag(para.text, "demo", **question) as stream:
            stream.text()
    assert [s.urn for s in stream.sources or []] == [f"urn:themis:demo:{para.key}"]
    assert stream.result is not None and stream.result.shard_id in url


def engines_sharing_one_machine_batch_on_one(root) -> None:
    """`themis up` runs both model copies on this machine's cores: a request without a domain
    that lands on shard-1 is decoded in the batch of shard-0, the host's batching engine, so
    concurrent requests make one batch instead of two that contend for the same cores."""
    plan = ClusterPlan.load(root / ".themis" / "plan.json")
    url = {m.shard_id: m.url for m in plan.members}
    key = (root / ".themis" / "auth" / "client.key").read_text().strip()
    for landing in ("shard-1", "shard-0"):
        with ThemisClient(url[landing], api_key=key, timeout=300) as themis_db:
            assert themis_db.infer("Water boils at", max_tokens=2, temperature=0).shard_id == "shard-0"
