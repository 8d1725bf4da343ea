"""The GPU check: one table for a shard's GPU paths, sized from the GPU it finds (`make gpu-check`).

Four steps, each against its peer in the same run:

1. engine   the shard (CUDA llama.cpp, HTTP, streaming) vs llama.cpp's own CUDA `llama-server`, the
            bundled Gemma 3 270M, 1/8/32 concurrent clients: tok/s, TTFT p50/p99, ratios.
2. vectors  faiss-gpu through the shard's own VectorIndex (CPU index the truth, a GPU copy that is
            never asked to remove, refreshed lazily) vs the CPU index: single-query QPS, recall@10
            against exact search after 1 % updates and 1 % deletes, deleted keys returned (must be 0).
3. parity   RAID parity on cupy vs the CPU codes (numpy XOR, leopard Reed–Solomon): encode and
            rebuild GB/s from host units (what RAID does: copies in and out included) and
            device-resident, and whether every byte is the same.
4. vram     where the GPU's memory goes: weights, KV cache and the vector index, measured as
            deltas of device memory in use, with the scheduler's preemption policy (fixed KV page
            pool; when a sequence needs a page that is not free, the latest lowest-priority
            sequence is preempted and recomputed later) driven past its pool by 32 clients.

Needs nothing from the network: the model is the bundled one; llama-server is the cached CUDA
build (`bench/llama_server_build.py --cuda` makes it once; pass --llama-server PATH for another).
On a GPU host it wants the [gpu] extra (faiss-gpu, cupy) and llama-cpp-python built with CUDA (the
CUDA shard image has both); a missing piece fails its step by name.

`--dry-run` (`make gpu-check DRY=1`) runs every step's plumbing on the CPU at tiny sizes: the same
code with the CPU stand-ins (a device copier whose copies refuse removal like GPU indexes, numpy as
the array module, resident-set size as "device memory"). Its engine step compares against a
cached CPU llama-server build when one exists and otherwise measures the shard alone: it never
compiles llama.cpp. Its numbers are plumbing, not measurements.

Usage: .venv/bin/python bench/gpu_check.py [--dry-run] [--llama-server PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import engine as engine_bench  # noqa: E402  (bench/engine.py: the clients and server launchers)

GiB = 1 << 30


# -- the GPU found and the sizes it gets ---------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int
    compute_capability: str  # "9.0"


def find_gpu() -> Gpu | None:
    """The first NVIDIA GPU nvidia-smi lists, or None."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total,compute_cap", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not done.stdout.strip():
        return None
    name, mem_mib, cap = (x.strip() for x in done.stdout.strip().splitlines()[0].split(","))
    return Gpu(name, int(float(mem_mib)) << 20, cap)


@dataclass(frozen=True)
class Sizes:
    clients: tuple[int, ...]
    max_tokens: int
    vectors: int
    dim: int
    queries: int
    updates: int  # upserts and deletes each
    parity_bytes: int
    parity_unit: int
    kv_cells: int  # the vram step's KV pool: small enough that pool_clients must preempt
    pool_clients: int


def sizes_for(gpu: Gpu | None, dry: bool) -> Sizes:
    if dry or gpu is None:
        return Sizes((1, 2), 4, 3000, 32, 50, 30, 4 << 20, 256 << 10, 256, 20)
    # 1M × 384 float32 is 1.5 GiB per copy: scale down only on a GPU too small for a few copies.
    vectors = min(1_000_000, max(100_000, int(gpu.memory_bytes / (12 * 384 * 4))))
    return Sizes((1, 8, 32), 128, vectors, 384, 1000, vectors // 100, 1 << 30, 4 << 20, 2048, 32)


# -- the table -------------------------------------------------------------------------------------


@dataclass
class Row:
    step: str
    measure: str
    ours: str
    peer: str = ""
    ratio: str = ""
    ok: bool = True


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b and a == a and b == b else ""


def print_table(title: str, rows: list[Row], timings: dict[str, float]) -> None:
    head = ("step", "measure", "themis / GPU", "peer", "ratio")
    cells = [(r.step, r.measure + ("" if r.ok else "  ✗"), r.ours, r.peer, r.ratio) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    print(f"\n{title}\n")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for c in cells:
        print("| " + " | ".join(x.ljust(w) for x, w in zip(c, widths, strict=True)) + " |")
    print("\nstep seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))


# -- memory in use: the device's, or this process's on the CPU -------------------------------------


class MemoryProbe:
    """Bytes in use: device memory (cupy) on a GPU, this process's resident set in a dry run."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.kind = "device" if xp is not np else "host RSS"

    def used(self) -> int:
        if self.xp is not np:
            free, total = self.xp.cuda.runtime.memGetInfo()
            return total - free
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- step 1: engine vs llama-server ------------------------------------------------------------------


def llama_server_path(cuda: bool, explicit: Path | None) -> Path | None:
    """The binary to compare with: given, or the cached build (never compiled in a dry run)."""
    if explicit is not None:
        return explicit
    args = [sys.executable, str(ROOT / "bench" / "llama_server_build.py")]
    args += ["--cuda"] if cuda else ["--cached-only"]
    done = subprocess.run(args, stdout=subprocess.PIPE, text=True)
    out = done.stdout.strip().splitlines()
    return Path(out[-1]) if done.returncode == 0 and out else None


def start_llama_server(
    binary: Path, model: Path, threads: int, slots: int, gpu: bool
) -> engine_bench.Process:
    port = engine_bench.free_port()
    cmd = [
        str(binary), "-m", str(model), "-a", "gemma3-270m", "-t", str(threads), "-tb", str(threads),
        "-c", "8192", "-np", str(slots), "-kvu", "-cb", "--no-webui", "--host", "127.0.0.1",
        "--port", str(port), "-ngl", "999" if gpu else "0",
    ]  # fmt: skip
    return engine_bench.Process(cmd, {}, port, "/health")


def step_engine(sizes: Sizes, gpu: bool, llama_server: Path | None, threads: int) -> list[Row]:
    from themis_shard.llm.model import resolve_model_path

    model = resolve_model_path("bundled")
    results: dict[str, dict[int, dict]] = {"themis": {}, "llama-server": {}}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["THEMIS_LLM_N_GPU_LAYERS"] = "-1" if gpu else "0"
        servers: list[tuple[str, Callable[[int], engine_bench.Process]]] = [
            ("themis", lambda n: engine_bench.start_themis(model, threads, tempfile.mkdtemp(dir=tmp)))
        ]
        if llama_server is not None:
            servers.append(
                (
                    "llama-server",
                    lambda n: start_llama_server(llama_server, model, threads, max(sizes.clients), gpu),
                )
            )
        for name, start in servers:
            srv = start(max(sizes.clients))
            try:
                asyncio.run(engine_bench.drive(srv.url, 1, 1, 8, [engine_bench.WARM_UP]))
                for n in sizes.clients:
                    results[name][n] = asyncio.run(engine_bench.drive(srv.url, n, 1, sizes.max_tokens))
            finally:
                srv.close()
    rows = []
    for n in sizes.clients:
        ours, peer = results["themis"][n], results["llama-server"].get(n)
        got = ours["tokens"] == ours["expected"]
        peer_tok = f"{peer['tok_s']:.1f}" if peer else "not built"
        tok_ratio = ratio(ours["tok_s"], peer["tok_s"]) if peer else ""
        rows.append(
            Row("engine", f"{n:>2} clients tok/s", f"{ours['tok_s']:.1f}", peer_tok, tok_ratio, ok=got)
        )
        for key in ("ttft_p50", "ttft_p99"):
            label = key.replace("ttft_", "TTFT ")
            peer_ms = f"{peer[key] * 1000:.0f} ms" if peer else ""
            rows.append(
                Row(
                    "engine",
                    f"{n:>2} clients {label}",
                    f"{ours[key] * 1000:.0f} ms",
                    peer_ms,
                    ratio(ours[key], peer[key]) if peer else "",
                )
            )
    return rows


# -- step 2: faiss-gpu vs the CPU index, with updates and deletes ----------------------------------


def clustered(n: int, dim: int, rng: np.random.Generator, centers: np.ndarray) -> np.ndarray:
    out = centers[rng.integers(0, len(centers), size=n)]
    out += 0.35 * rng.standard_normal(size=(n, dim), dtype=np.float32)
    return out


def step_vectors(sizes: Sizes, device: Any, budget_s: float) -> list[Row]:
    from themis_shard.storage.collections import CollectionConfig
    from themis_shard.vector.index import VectorIndex

    rng = np.random.default_rng(0)
    centers = rng.standard_normal(size=(256, sizes.dim), dtype=np.float32)
    data = clustered(sizes.vectors, sizes.dim, rng, centers)
    keys = [f"k{i}" for i in range(sizes.vectors)]
    queries = clustered(sizes.queries, sizes.dim, rng, centers)
    moved = rng.choice(sizes.vectors, size=sizes.updates, replace=False)
    gone = rng.choice(np.setdiff1d(np.arange(sizes.vectors), moved), size=sizes.updates, replace=False)
    new_vectors = clustered(sizes.updates, sizes.dim, rng, centers)
    exact = VectorIndex(CollectionConfig(name="x", dimension=sizes.dim, index="flat"))
    exact.rebuild(keys, data)
    rows: list[Row] = []
    indexes: dict[str, tuple[VectorIndex, VectorIndex]] = {}
    for kind in ("flat", "ivf"):
        config = CollectionConfig(name="v", dimension=sizes.dim, index=kind)
        pair = (VectorIndex(config), VectorIndex(config, device=device))
        for index in pair:
            index.rebuild(keys, data)
        indexes[kind] = pair
    # Updates and deletes in commit-sized batches, a search between batches (the copy refreshes lazily).
    batch = max(1, sizes.updates // 20)
    update_s = {"cpu": 0.0, "gpu": 0.0}
    for lo in range(0, sizes.updates, batch):
        up = [keys[i] for i in moved[lo : lo + batch]]
        down = [keys[i] for i in gone[lo : lo + batch]]
        exact.upsert(up, new_vectors[lo : lo + batch])
        exact.remove(down)
        for index in (*indexes["flat"], *indexes["ivf"]):
            t0 = time.perf_counter()
            index.upsert(up, new_vectors[lo : lo + batch])
            index.remove(down)
            index.search(queries[0], 10)
            side = "gpu" if index.use_gpu else "cpu"
            update_s[side] += time.perf_counter() - t0
    deleted = {keys[i] for i in gone}
    truth = [{h.key for h in exact.search(q, 10)} for q in queries]
    for kind, (cpu, gpu) in indexes.items():
        measured = {}
        for side, index in (("gpu", gpu), ("cpu", cpu)):
            found = stale = done = 0
            t0 = time.perf_counter()
            for q, want in zip(queries, truth, strict=True):
                hits = {h.key for h in index.search(q, 10)}
                found += len(hits & want)
                stale += len(hits & deleted)
                done += 1
                if time.perf_counter() - t0 > budget_s:
                    break
            wall = time.perf_counter() - t0
            measured[side] = (done / wall, found / (10 * done), stale)
        (g_qps, g_recall, g_stale), (c_qps, c_recall, c_stale) = measured["gpu"], measured["cpu"]
        label = f"{kind} {sizes.vectors:,}×{sizes.dim}"
        rows.append(
            Row("vectors", f"{label} QPS (1 query)", f"{g_qps:.0f}", f"{c_qps:.0f}", ratio(g_qps, c_qps))
        )
        recall_ok = g_recall >= c_recall - 0.02
        rows.append(
            Row(
                "vectors",
                f"{label} recall@10 after upd/del",
                f"{g_recall:.3f}",
                f"{c_recall:.3f}",
                ok=recall_ok,
            )
        )
        rows.append(
            Row(
                "vectors",
                f"{label} deleted keys returned",
                str(g_stale),
                str(c_stale),
                ok=g_stale == c_stale == 0,
            )
        )
        rows.append(Row("vectors", f"{label} device copies made", str(gpu.device_refreshes)))
    gpu_s, cpu_s = update_s["gpu"], update_s["cpu"]
    measure = f"{2 * sizes.updates:,} upserts+deletes (+1 search/batch), s"
    rows.append(Row("vectors", measure, f"{gpu_s:.2f}", f"{cpu_s:.2f}", ratio(gpu_s, cpu_s)))
    return rows


# -- step 3: parity on the array module vs the CPU codes -------------------------------------------


def best_rate(fn: Callable[[], Any], nbytes: int, sync: Callable[[], None], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def step_parity(sizes: Sizes, xp: Any) -> list[Row]:
    rows: list[Row] = []
    for kind, k, m, label in (("xor", 7, 1, "RAID5 XOR 7+1"), ("rs", 6, 2, "RAID6 RS 6+2")):
        rows += parity_rows(kind, k, m, label, sizes, xp)
    if xp is not np:  # hand cupy's cached blocks back before the memory split is measured
        xp.get_default_memory_pool().free_all_blocks()
    return rows


def parity_rows(kind: str, k: int, m: int, label: str, sizes: Sizes, xp: Any) -> list[Row]:
    from themis_shard.raid.parity import LinearRSCodec, OnDevice, XorCodec, make_codec

    def sync() -> None:
        if xp is not np:
            xp.cuda.Device().synchronize()

    unit = sizes.parity_unit
    stripes = max(1, sizes.parity_bytes // (k * unit))
    rng = np.random.default_rng(k)
    host = [[rng.integers(0, 256, unit, dtype=np.uint8) for _ in range(k)] for _ in range(stripes)]
    nbytes = stripes * k * unit
    cpu = make_codec(kind, k, m, unit)  # the CPU path RAID takes: numpy XOR, leopard RS
    inner = XorCodec(k, unit, xp) if kind == "xor" else LinearRSCodec(k, m, xp)
    # Host units in and out, parity on the device: what make_codec gives RAID with cupy (and,
    # in a dry run, the same code over numpy, which make_codec would route to the CPU codes).
    dev = make_codec(kind, k, m, unit, xp=xp) if xp is not np else OnDevice(inner, xp)
    resident = [[xp.asarray(u) for u in s] for s in host]
    same = all(
        np.array_equal(a, b)
        for s in host
        for a, b in zip([p.copy() for p in cpu.encode(s)], dev.encode(s), strict=True)
    )
    lost = list(range(m))  # data units: the expensive repair
    stripe0 = host[0] + [p.copy() for p in cpu.encode(host[0])]
    present = {i: u for i, u in enumerate(stripe0) if i not in lost}
    rebuilt = dev.reconstruct(present, lost)
    same = same and all(np.array_equal(rebuilt[i], stripe0[i]) for i in lost)
    enc_cpu = best_rate(lambda: [cpu.encode(s) for s in host], nbytes, lambda: None)
    enc_dev = best_rate(lambda: [dev.encode(s) for s in host], nbytes, sync)
    enc_res = best_rate(lambda: [inner.encode(s) for s in resident], nbytes, sync)
    rec_cpu = best_rate(lambda: cpu.reconstruct(present, lost), k * unit, lambda: None)
    rec_dev = best_rate(lambda: dev.reconstruct(present, lost), k * unit, sync)

    def rate_row(measure: str, ours: float, peer: float) -> Row:
        return Row("parity", f"{label} {measure}", f"{ours:.2f}", f"{peer:.2f}", ratio(ours, peer))

    return [
        rate_row("encode GB/s (host units)", enc_dev, enc_cpu),
        rate_row("encode GB/s (device-resident)", enc_res, enc_cpu),
        rate_row(f"rebuild {m} GB/s (host units)", rec_dev, rec_cpu),
        Row("parity", f"{label} bit-identical to the CPU", "yes" if same else "NO", ok=same),
    ]


# -- step 4: the VRAM split under the preemption policy --------------------------------------------


def step_vram(sizes: Sizes, gpu: bool, probe: MemoryProbe, device: Any, threads: int) -> list[Row]:
    from themis_shard.llm.engine import Engine, EngineConfig
    from themis_shard.llm.model import resolve_model_path
    from themis_shard.llm.native import NativeModel
    from themis_shard.llm.scheduler import Limits
    from themis_shard.storage.collections import CollectionConfig
    from themis_shard.vector.index import VectorIndex

    model_path = resolve_model_path("bundled")
    before = probe.used()
    native = NativeModel(model_path, n_gpu_layers=-1 if gpu else 0)
    weights = probe.used() - before
    before = probe.used()
    engine = Engine(
        native, EngineConfig(n_ctx=sizes.kv_cells, n_threads=threads, limits=Limits(max_running=64))
    )
    kv = probe.used() - before
    try:
        engine.start()
        clients = sizes.pool_clients
        run = engine_bench.engine_inprocess(engine, native, clients, 1, sizes.max_tokens * 2)
        preemptions = engine.scheduler.preemptions
        pages = engine.ledger.total_pages
    finally:
        engine.stop()
    rng = np.random.default_rng(1)
    before = probe.used()
    index = VectorIndex(CollectionConfig(name="m", dimension=sizes.dim, index="flat"), device=device)
    index.rebuild(
        [f"k{i}" for i in range(sizes.vectors)], rng.standard_normal((sizes.vectors, sizes.dim), np.float32)
    )
    index.search(np.ones(sizes.dim, np.float32), 10)  # the device copy is made here
    vectors = probe.used() - before
    native.close()
    total = weights + kv + vectors
    share = (lambda b: f"{100 * b / total:.0f} %") if total > 0 else (lambda b: "")
    return [
        Row("vram", f"weights ({probe.kind}), GiB", f"{weights / GiB:.3f}", share(weights)),
        Row("vram", f"KV cache {sizes.kv_cells} cells = {pages} pages, GiB", f"{kv / GiB:.3f}", share(kv)),
        Row(
            "vram",
            f"vector index {sizes.vectors:,}×{sizes.dim} (FAISS scratch apart), GiB",
            f"{vectors / GiB:.3f}",
            share(vectors),
        ),
        Row("vram", f"{clients} clients on the pool: preemptions", str(preemptions)),
        Row(
            "vram",
            f"{clients} clients on the pool: tokens",
            f"{run['tokens']}/{run['expected']}",
            ok=run["tokens"] == run["expected"],
        ),
    ]


# -- the run -----------------------------------------------------------------------------------------


def prerequisites(dry: bool) -> tuple[Any, Any, list[str]]:
    """(array module, device copier, missing pieces) for this run."""
    if dry:
        from themis_testing.devices import CpuDeviceCopier

        return np, CpuDeviceCopier(), []
    missing = []
    from themis_shard.raid.parity import array_module
    from themis_shard.vector.index import FaissGpu, gpu_count

    xp = array_module(prefer_gpu=True)
    if xp is np:
        missing.append("cupy with a usable CUDA device (pip install 'themisdb[gpu]')")
    device = FaissGpu() if gpu_count() > 0 else None
    if device is None:
        missing.append("faiss-gpu seeing a GPU (pip install 'themisdb[gpu]')")
    import llama_cpp

    if not llama_cpp.llama_supports_gpu_offload():
        missing.append(
            "llama-cpp-python built with CUDA (the CUDA shard image, or CMAKE_ARGS=-DGGML_CUDA=on)"
        )
    return xp, device, missing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU plumbing at tiny sizes (no GPU needed)")
    ap.add_argument(
        "--llama-server", type=Path, default=None, help="the peer's binary (default: cached build)"
    )
    ap.add_argument("--threads", type=int, default=min(8, os.cpu_count() or 2))
    ap.add_argument("--skip", default="", help="comma list of: engine,vectors,parity,vram")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    gpu = None if args.dry_run else find_gpu()
    if gpu is None and not args.dry_run:
        print(
            "no NVIDIA GPU found (nvidia-smi): run `make gpu-check DRY=1` for the CPU dry run",
            file=sys.stderr,
        )
        return 2
    xp, device, missing = prerequisites(args.dry_run)
    if missing:
        print("the GPU check needs: " + "; ".join(missing), file=sys.stderr)
        return 2
    sizes = sizes_for(gpu, args.dry_run)
    probe = MemoryProbe(xp)
    on_gpu = gpu is not None
    steps: list[tuple[str, Callable[[], list[Row]]]] = [
        (
            "engine",
            lambda: step_engine(sizes, on_gpu, llama_server_path(on_gpu, args.llama_server), args.threads),
        ),
        ("vectors", lambda: step_vectors(sizes, device, budget_s=10.0 if on_gpu else 2.0)),
        ("parity", lambda: step_parity(sizes, xp)),
        ("vram", lambda: step_vram(sizes, on_gpu, probe, device, args.threads)),
    ]
    rows: list[Row] = []
    timings: dict[str, float] = {}
    for name, run in steps:
        if name in skip:
            continue
        t0 = time.perf_counter()
        try:
            rows += run()
        except Exception as exc:  # one failed step is a row of the table, and the run fails
            rows.append(Row(name, "failed", f"{type(exc).__name__}: {exc}"[:120], ok=False))
        timings[name] = time.perf_counter() - t0
    where = (
        f"{gpu.name}, {gpu.memory_bytes / GiB:.0f} GiB, sm_{gpu.compute_capability}" if gpu else "CPU dry run"
    )
    print_table(
        f"Themis GPU check — {where} (peer column: llama-server / CPU index / CPU codes)", rows, timings
    )
    print(json.dumps({"ok": all(r.ok for r in rows), "seconds": round(sum(timings.values()), 1)}))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
