"""Spec: the quickstart — `themis demo` against a real local cluster (real shard processes, the
real model and embedding model, API keys on) loads the CC0 corpus with embeddings, answers one
RAG question and runs one AQL query, and every source it prints is a paragraph of the corpus."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from themis_shard.demo.corpus import load_corpus

pytestmark = [pytest.mark.e2e, pytest.mark.llm, pytest.mark.slow]


def themis(*args: str, cwd, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "themis_shard.local_cluster", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_demo_loads_the_corpus_and_answers_from_it(tmp_path) -> None:
    pytest.importorskip("llama_cpp")
    up = themis("up", "--shards", "2", "--base-port", "0", "--auth", "--timeout", "600", cwd=tmp_path)
    try:
        assert up.returncode == 0, up.stderr
        demo = themis("demo", "--json", "--max-tokens", "8", cwd=tmp_path)
        assert demo.returncode == 0, demo.stderr
        report = json.loads(demo.stdout)
        corpus = {f"urn:themis:demo:{p.key}": p for p in load_corpus()}
        assert report["loaded"] == len(corpus) >= 200
        sources = report["rag"]["sources"]
        assert len(sources) == 3 and all(s["urn"] in corpus for s in sources)
        assert sources[0]["urn"] == "urn:themis:demo:physics-why-the-sky-is-blue"
        assert isinstance(report["rag"]["answer"], str)
        rows = report["aql"]["result"]
        assert report["aql"]["topic"] == "physics" and 1 <= len(rows) <= 3
        assert all(r["urn"] in corpus and corpus[r["urn"]].topic == "physics" for r in rows)
        assert rows[0]["urn"] == sources[0]["urn"]

        text = themis("demo", "--skip-load", "--max-tokens", "8", cwd=tmp_path)  # the human-readable form
        assert text.returncode == 0, text.stderr
        assert "urn:themis:demo:physics-why-the-sky-is-blue" in text.stdout and "answer:" in text.stdout
    finally:
        themis("down", cwd=tmp_path, timeout=120)
