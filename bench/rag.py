"""RAG, converged against two-tier: Themis's ``/v1/rag`` against the stack a user would assemble.

The two-tier stack, started here on the same machine: a Chroma server (its own venv,
``chromadb`` from PyPI, made once under ``~/.cache/themis/tools/``), llama.cpp's C++
``llama-server`` for generation and a second ``llama-server`` in embedding mode
(``bench/llama_server_build.py`` builds it once). Same models as Themis (the bundled Gemma 3 270M
and the all-MiniLM-L6-v2 GGUF the shard converts), same 280-paragraph demo corpus, same ``k``, the
same prompt template (``rag.prompt.build_prompt``; the two-tier app lists passages in Chroma's
score order, as a user's app would), greedy, the same ``max_tokens``.

Themis runs as 1 shard and as 3 shards (``themis up``; the 3-shard clients spread requests over
the shards as a load balancer would). For each stack and client count (interleaved rounds, each
round and count with questions about other paragraphs, so no cache has seen them): every question
once, streamed; latency p50/p99, TTFT p50, answers/s, and the hit rate (the question's own
paragraph among the sources). Then repeated questions over the same documents, on paragraphs
not asked about before: per question a second, differently worded one; the second's TTFT over
the first's, where both retrieved the same paragraphs. Ratios are Themis ÷ two-tier (answers/s
above 1 is better for Themis, latency below 1).

The two-tier stack runs twice: as llama-server starts by default, and with llama-server's own
n-gram speculation (``--spec-type ngram-simple``), since Themis's RAG speculates by default;
the ratios are printed against both. Its processes run under the shards' CPU scheduling policy
(``_sched.py``: SCHED_BATCH unless ``THEMIS_SCHED_POLICY=normal``), so neither side has the
scheduler's help alone; ``--peer-sched default`` starts them as packaged.

Run: `.venv/bin/python bench/rag.py [--questions 20] [--clients 1,8] [--max-tokens 48] [--k 3]
[--no-peer-speculation] [--peer-sched same|default]`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from _local import themis
from _sched import POLICY, launcher, scheduled_batch, shards_batch
from themis_client import ThemisClient
from themis_core.plan import ClusterPlan
from themis_shard.demo.corpus import Paragraph, load_corpus
from themis_shard.llm.artifacts import cache_root
from themis_shard.rag.prompt import build_prompt

CHROMA_VERSION = "1.5.9"
PASSAGE_CHARS = 1000  # AqlSettings.rag_context_chars, what /v1/rag cuts passages to
COLLECTION = "demo"


@dataclass
class Answer:
    latency: float
    ttft: float
    keys: list[str]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url} did not become ready")


def chroma_binary() -> Path:
    """``chroma`` from its own venv (its dependencies never meet Themis's), made once."""
    venv = cache_root() / "tools" / f"chroma-{CHROMA_VERSION}"
    binary = venv / "bin" / "chroma"
    if not binary.exists():
        print(f"making {venv} (pip install chromadb=={CHROMA_VERSION}, once)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", f"chromadb=={CHROMA_VERSION}"], check=True
        )
    return binary


def llama_server_binary() -> Path:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("llama_server_build.py"))],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip().splitlines()[-1])


def question_sets(paragraphs: list[Paragraph], n: int, sets: int) -> list[list[tuple[str, str, str]]]:
    """``sets`` disjoint sets of ``n`` (question, a second wording, the paragraph's key), drawn
    over every topic in a fixed shuffled order: no stack is ever asked a prompt twice by accident
    (both serving stacks cache prompts), only where the repeated-question measure means to."""
    order = paragraphs[:]
    random.Random(7).shuffle(order)
    if n * sets > len(order):
        raise SystemExit(f"{n} questions × {sets} sets need more than the corpus's {len(order)} paragraphs")
    return [
        [(f"What do you know about {p.title}?", f"Tell me one fact about {p.title}.", p.key) for p in part]
        for part in (order[i * n : (i + 1) * n] for i in range(sets))
    ]


def sse_events(lines: list[str]) -> list[dict]:
    return [json.loads(line[5:]) for line in lines if line.startswith("data: {")]


# -- the two-tier stack ------------------------------------------------------------------------------
class TwoTier:
    """``lookup``: the generating llama-server speculates with its own prompt lookup
    (``--spec-type ngram-simple``, 3-token n-grams, drafts of up to 8: Themis's prompt lookup
    matches 2..4-gram and drafts up to 8), as Themis's RAG does by default."""

    def __init__(
        self,
        tmp: Path,
        gen_model: Path,
        embed_model: Path,
        threads: int,
        slots: int,
        *,
        lookup: bool = False,
        prefix: list[str] | None = None,
    ) -> None:
        """``prefix``: the launcher of the stack's CPU scheduling policy (``_sched.launcher``)."""
        self.name = "two-tier (Chroma + llama-server ×2)" + (", n-gram speculation" if lookup else "")
        server = llama_server_binary()
        spec = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                "--spec-ngram-simple-size-m", "8"] if lookup else []  # fmt: skip
        self.procs: list[subprocess.Popen] = []
        self.prefix = prefix or []
        gen_port, emb_port, chroma_port = free_port(), free_port(), free_port()
        common = ["-t", str(threads), "-tb", str(threads), "--host", "127.0.0.1", "--no-webui"]
        self._start(
            [str(server), "-m", str(gen_model), "-c", "8192", "-np", str(slots), "-kvu", "-cb",
             "--port", str(gen_port), *spec, *common],
            f"http://127.0.0.1:{gen_port}/health",
        )  # fmt: skip
        self._start(
            [str(server), "-m", str(embed_model), "--embedding", "--pooling", "mean", "-c", "4096",
             "-np", str(slots), "-ub", "512", "--port", str(emb_port), *common],
            f"http://127.0.0.1:{emb_port}/health",
        )  # fmt: skip
        self._start(
            [str(chroma_binary()), "run", "--path", str(tmp / f"chroma-{chroma_port}"),
             "--port", str(chroma_port)],
            f"http://127.0.0.1:{chroma_port}/api/v2/heartbeat",
        )  # fmt: skip
        self.gen, self.emb = f"http://127.0.0.1:{gen_port}", f"http://127.0.0.1:{emb_port}"
        db = "/api/v2/tenants/default_tenant/databases/default_database"
        self.chroma = f"http://127.0.0.1:{chroma_port}{db}"
        self.collection = ""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def _start(self, cmd: list[str], ready: str) -> None:
        log = open(os.devnull, "w")  # noqa: SIM115 (the process owns it)
        proc = subprocess.Popen([*self.prefix, *cmd], stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        wait_ready(ready, proc)

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()

    def ingest(self, paragraphs: list[Paragraph]) -> float:
        started = time.perf_counter()
        with httpx.Client(timeout=300) as http:
            made = http.post(
                f"{self.chroma}/collections",
                json={"name": COLLECTION, "configuration": {"hnsw": {"space": "cosine"}}},
            )
            made.raise_for_status()
            self.collection = made.json()["id"]
            for i in range(0, len(paragraphs), 32):
                part = paragraphs[i : i + 32]
                r = http.post(f"{self.emb}/v1/embeddings", json={"input": [p.text for p in part]})
                r.raise_for_status()
                vectors = [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
                http.post(
                    f"{self.chroma}/collections/{self.collection}/add",
                    json={
                        "ids": [p.key for p in part],
                        "embeddings": vectors,
                        "documents": [p.text for p in part],
                    },
                ).raise_for_status()
        return time.perf_counter() - started

    async def ask(self, http: httpx.AsyncClient, _i: int, question: str, k: int, max_tokens: int) -> Answer:
        t0 = time.perf_counter()
        r = await http.post(f"{self.emb}/v1/embeddings", json={"input": [question]})
        r.raise_for_status()
        vector = r.json()["data"][0]["embedding"]
        r = await http.post(
            f"{self.chroma}/collections/{self.collection}/query",
            json={"query_embeddings": [vector], "n_results": k, "include": ["documents", "distances"]},
        )
        r.raise_for_status()
        found = r.json()
        prompt = build_prompt(question, found["documents"][0], passage_chars=PASSAGE_CHARS)
        body = {
            "prompt": prompt,
            "n_predict": max_tokens,
            "temperature": 0,
            "stream": True,
            "cache_prompt": True,
        }
        ttft = None
        async with http.stream("POST", f"{self.gen}/completion", json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if ttft is None and line.startswith("data: {") and json.loads(line[5:]).get("content"):
                    ttft = time.perf_counter() - t0
        latency = time.perf_counter() - t0
        return Answer(latency, ttft if ttft is not None else latency, list(found["ids"][0]))


# -- Themis ------------------------------------------------------------------------------------------
class Themis:
    def __init__(self, tmp: Path, shards: int) -> None:
        self.name = f"Themis, {shards} shard{'s' if shards > 1 else ''}"
        self.cwd = tmp / f"themis-{shards}"
        self.cwd.mkdir()
        raid = "raid1" if shards > 1 else "raid0"
        themis(self.cwd, "up", "--shards", str(shards), "--base-port", "0", "--raid-mode", raid)
        self.urls = [m.url for m in ClusterPlan.load(self.cwd / ".themis" / "plan.json").members]
        running = json.loads((self.cwd / ".themis" / "cluster.json").read_text())["shards"]
        self.pids = [s["pid"] for s in running]

    def close(self) -> None:
        themis(self.cwd, "down")

    def ingest(self, paragraphs: list[Paragraph]) -> float:
        started = time.perf_counter()
        with ThemisClient(self.urls[0], timeout=300) as db:
            db.declare_collection(COLLECTION, embed_field="text")
            for i in range(0, len(paragraphs), 32):
                db.batch(COLLECTION, {p.key: p.document() for p in paragraphs[i : i + 32]})
        return time.perf_counter() - started

    async def ask(self, http: httpx.AsyncClient, i: int, question: str, k: int, max_tokens: int) -> Answer:
        body = {"query": question, "collection": COLLECTION, "k": k, "max_tokens": max_tokens}
        t0, ttft, lines = time.perf_counter(), None, []
        url = self.urls[i % len(self.urls)]  # a load balancer's round robin
        async with http.stream("POST", f"{url}/v1/rag", json={**body, "temperature": 0, "stream": True}) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if ttft is None and line.startswith("data: {") and json.loads(line[5:]).get("token"):
                    ttft = time.perf_counter() - t0
                lines.append(line)
        latency = time.perf_counter() - t0
        sources = next(e["sources"] for e in sse_events(lines) if "sources" in e)
        return Answer(
            latency, ttft if ttft is not None else latency, [s["urn"].rsplit(":", 1)[1] for s in sources]
        )


# -- measuring ---------------------------------------------------------------------------------------
#: llama-server closes a keep-alive connection idle for 5 s; a client that reuses one as it closes
#: gets "Server disconnected without sending a response". Drop idle connections sooner.
PEER_LIMITS = httpx.Limits(max_connections=64, keepalive_expiry=2.0)


async def level(stack, qs: list[tuple[str, str, str]], clients: int, k: int, max_tokens: int) -> dict:
    queue = list(enumerate(qs))
    answers: list[tuple[Answer, str]] = []

    async def worker(http: httpx.AsyncClient) -> None:
        while queue:
            i, (question, _, key) = queue.pop(0)
            answers.append((await stack.ask(http, i, question, k, max_tokens), key))

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=600, limits=PEER_LIMITS) as http:
        await asyncio.gather(*(worker(http) for _ in range(clients)))
    wall = time.perf_counter() - started
    lat = sorted(a.latency for a, _ in answers)
    return {
        "answers_s": len(answers) / wall,
        "p50": statistics.median(lat),
        "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "ttft": statistics.median(a.ttft for a, _ in answers),
        "hits": sum(key in a.keys for a, key in answers) / len(answers),
    }


async def repeated(
    stack, qs: list[tuple[str, str, str]], k: int, max_tokens: int
) -> tuple[float | None, int]:
    """Median TTFT of the second wording over the first, where both retrieved the same paragraphs."""
    ratios = []
    async with httpx.AsyncClient(timeout=600, limits=PEER_LIMITS) as http:
        for i, (first, second, _) in enumerate(qs):
            a = await stack.ask(http, i, first, k, max_tokens)
            b = await stack.ask(http, i, second, k, max_tokens)
            if sorted(a.keys) == sorted(b.keys):
                ratios.append(b.ttft / a.ttft)
    return (statistics.median(ratios) if ratios else None), len(ratios)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best answers/s is kept")
    ap.add_argument(
        "--no-peer-speculation", action="store_true", help="no two-tier stack with n-gram speculation"
    )
    ap.add_argument(
        "--peer-sched",
        choices=["same", "default"],
        default="same",
        help="the two-tier stack's CPU scheduling: the shards' (SCHED_BATCH by default) or the default",
    )
    args = ap.parse_args()
    from themis_shard.llm.embeddings import bundled_embedding_gguf
    from themis_shard.llm.model import resolve_model_path
    from themis_shard.llm.settings import LLMSettings

    paragraphs = load_corpus()
    levels = [int(c) for c in args.clients.split(",")]
    sets = question_sets(paragraphs, args.questions, args.rounds * len(levels) + 1)
    qs, fresh = sets[0], sets[-1]
    gen_model, embed_model = resolve_model_path("bundled"), bundled_embedding_gguf(LLMSettings())
    batch = shards_batch()  # `themis up` starts the shards from this environment
    peer = launcher(batch and args.peer_sched == "same")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        stacks = []
        try:
            cores = os.cpu_count() or 2
            stacks.append(TwoTier(tmp, gen_model, embed_model, cores, max(levels), prefix=peer))
            if not args.no_peer_speculation:
                stacks.append(
                    TwoTier(tmp, gen_model, embed_model, cores, max(levels), lookup=True, prefix=peer)
                )
            stacks += [Themis(tmp, 1), Themis(tmp, 3)]
            ingest = {s.name: s.ingest(paragraphs) for s in stacks}
            results: dict[tuple[str, int], dict] = {}
            for r in range(args.rounds):
                for j, clients in enumerate(levels):
                    asked = sets[r * len(levels) + j]
                    for stack in stacks:  # interleaved: the machine's noise hits every stack alike
                        row = asyncio.run(level(stack, asked, clients, args.k, args.max_tokens))
                        best = results.get((stack.name, clients))
                        if best is None or row["answers_s"] > best["answers_s"]:
                            results[(stack.name, clients)] = row
            again = {s.name: asyncio.run(repeated(s, fresh, args.k, args.max_tokens)) for s in stacks}
            # the policies the processes run under, read back (a kernel may refuse one)
            ran = {kind: all(scheduled_batch(p) for s in stacks if isinstance(s, kind) for p in s.pids)
                   for kind in (Themis, TwoTier)}  # fmt: skip
        finally:
            for s in stacks:
                s.close()
    peers = [s.name for s in stacks if isinstance(s, TwoTier)]
    print(
        f"\nRAG: {len(qs)} questions, k={args.k}, {args.max_tokens} greedy tokens, "
        f"best of {args.rounds} interleaved rounds, {os.cpu_count()} cores shared by every stack; "
        f"CPU scheduling: Themis's shards {POLICY[ran[Themis]]}, the two-tier stack {POLICY[ran[TwoTier]]}"
    )
    heads = " | ".join(f"vs {'two-tier' if i == 0 else 'two-tier + spec'}: answers/s · p50 · p99 · TTFT"
                       for i, _ in enumerate(peers))  # fmt: skip
    print(f"| stack | clients | answers/s | p50 s | p99 s | TTFT p50 s | hit rate | {heads} |")
    print("|---|---:|---:|---:|---:|---:|---:|" + "---|" * len(peers))
    for clients in levels:
        for s in stacks:
            r = results[(s.name, clients)]
            ratios = " | ".join("—" if s.name in peers else vs(r, results[(p, clients)]) for p in peers)
            print(
                f"| {s.name} | {clients} | {r['answers_s']:.2f} | {r['p50']:.2f} | {r['p99']:.2f} "
                f"| {r['ttft']:.3f} | {100 * r['hits']:.0f} % | {ratios} |"
            )
    print(
        "\n| stack | ingest of 280 paragraphs s | repeated question over the same documents: TTFT 2nd / 1st |"
    )
    print("|---|---:|---|")
    for s in stacks:
        ratio, pairs = again[s.name]
        shown = f"{ratio:.2f} (median of {pairs} pairs)" if ratio is not None else "no pair retrieved alike"
        print(f"| {s.name} | {ingest[s.name]:.1f} | {shown} |")


def vs(r: dict, ref: dict) -> str:
    """Themis ÷ a two-tier row: answers/s · p50 · p99 · TTFT p50."""
    return (
        f"{r['answers_s'] / ref['answers_s']:.2f} · {r['p50'] / ref['p50']:.2f} · "
        f"{r['p99'] / ref['p99']:.2f} · {r['ttft'] / ref['ttft']:.2f}"
    )


if __name__ == "__main__":
    main()
