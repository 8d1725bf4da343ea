"""KV-prefix cache benchmark: TTFT of prefix + 32 new tokens, cold vs hit, and the
break-even between pulling a state from a peer and prefilling it locally.

One process, two engines on the bundled Gemma 3 270M (2 threads each, used one at a time):

* cold        — empty cache: the whole prompt is prefilled (the state is saved on the way);
* local hit   — the same prompt again: the prefix state is restored, 32 tokens prefilled;
* remote hit  — engine A's state exported (binary blob), sent over loopback HTTP to a tiny
  server in this process, fully validated + trial-loaded into engine B (``prefix_io``), then the
  prompt on B: TTFT_B + transfer + import time;
* break-even  — the bandwidth below which pulling is slower than prefilling locally:
  bytes / (cold − local hit − import), and the prefill tokens/s the shard's estimator uses.

Run: `.venv/bin/python bench/prefix.py [--sizes 256,512,1024]`. Shared, noisy machine: compare
the rows of one run.

``--cluster``: prefix-aware routing on a real 3-shard local cluster (`themis up`, the bundled
model). A shared-prefix workload — ``--prefixes`` long system texts, each asked ``--rounds``
questions, sent by one client round robin over the shards — under three settings, each on a
fresh cluster: *round robin* (no prefix sharing: ``THEMIS_LLM_PREFIX_PULL=false``,
``THEMIS_LLM_PREFIX_ROUTE=false``), *pull on miss* (the routing before this: a request runs
where it lands and pulls a peer's prefix state) and *prefix-aware* (a request without a domain
goes to the shard holding its prefix, load permitting). Prints TTFT p50/p90 and where requests
ran, with ratios to round robin.
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import threading
import time

import httpx

#: Prefix routing alone: the shards' engines share this machine, so joining one engine's batch
#: (``THEMIS_LLM_HOST_BATCHING``) is off in every mode, or "round robin" would not be.
ALONE = {"THEMIS_LLM_HOST_BATCHING": "false"}
MODES = {
    "round robin": {"THEMIS_LLM_PREFIX_PULL": "false", "THEMIS_LLM_PREFIX_ROUTE": "false", **ALONE},
    "pull on miss": {"THEMIS_LLM_PREFIX_PULL": "true", "THEMIS_LLM_PREFIX_ROUTE": "false", **ALONE},
    "prefix-aware": {"THEMIS_LLM_PREFIX_PULL": "true", "THEMIS_LLM_PREFIX_ROUTE": "true", **ALONE},
}


def system_text(i: int) -> str:
    """A long, distinct system prefix (a few hundred tokens)."""
    return f"System {i}. You answer from this ledger only. " + " ".join(
        f"Entry {j}: account {(i * 31 + j) % 97} moved {(i * 17 + j * 13) % 1000} units to desk {j % 9}."
        for j in range(40)
    )


def ttft_stream(client, url: str, prompt: str) -> tuple[float, str]:
    import json

    t0 = time.perf_counter()
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0.0, "stream": True}
    with client.stream("POST", f"{url}/v1/infer", json=body) as r:
        r.raise_for_status()
        shard = r.headers.get("X-Themis-Shard", "?")
        first = None
        for line in r.iter_lines():
            if first is None and line.startswith("data: {") and "token" in json.loads(line[5:]):
                first = time.perf_counter() - t0
    return (first if first is not None else time.perf_counter() - t0), shard


def cluster_main(args) -> None:
    import json
    import os
    import statistics
    import tempfile
    from pathlib import Path

    from _local import api_headers, themis

    def pct(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    results = {}
    for mode, env in MODES.items():
        os.environ.update(env)  # inherited by the shards
        with tempfile.TemporaryDirectory() as tmp:
            cwd = Path(tmp)
            themis(cwd, "up", "--shards", "3", "--base-port", str(args.base_port))
            try:
                state = json.loads((cwd / ".themis" / "cluster.json").read_text())
                urls = [s["url"] for s in state["shards"]]
                times, ran, n = [], {}, 0
                with httpx.Client(timeout=600, headers=api_headers(cwd)) as client:
                    for r in range(args.rounds):
                        for p in range(args.prefixes):
                            prompt = f"{system_text(p)}\nQuestion {r}: which desk got the most units? Answer:"
                            t, shard = ttft_stream(client, urls[n % len(urls)], prompt)
                            n += 1
                            times.append(t)
                            ran[shard] = ran.get(shard, 0) + 1
                            time.sleep(args.gap)  # the prefix directory hears of new states by gossip
                results[mode] = (times, ran)
            finally:
                themis(cwd, "down")
    base50, base90 = pct(results["round robin"][0], 0.5), pct(results["round robin"][0], 0.9)
    print(
        f"\nPrefix-aware routing: 3 shards, {args.prefixes} shared prefixes × {args.rounds} questions, "
        f"one client round robin over the shards, TTFT of /v1/infer streams (s)"
    )
    print(
        "| routing | TTFT p50 | TTFT p90 | mean | p50 ÷ round robin | p90 ÷ round robin "
        "| requests per shard |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for mode, (times, ran) in results.items():
        p50, p90 = pct(times, 0.5), pct(times, 0.9)
        per = ", ".join(f"{k} {v}" for k, v in sorted(ran.items()))
        print(
            f"| {mode} | {p50:.3f} | {p90:.3f} | {statistics.mean(times):.3f} | {p50 / base50:.2f} "
            f"| {p90 / base90:.2f} | {per} |"
        )


def local_rows(sizes: list[int], threads: int) -> list[tuple]:
    """Per prefix size: (prefix tokens, state bytes, cold TTFT, local-hit TTFT, remote-hit total,
    loopback transfer, validate+trial load, break-even bandwidth B/s, prefill tokens/s)."""
    from prometheus_client import CollectorRegistry
    from themis_shard.llm import kv_blob
    from themis_shard.llm.engine import Engine, EngineConfig
    from themis_shard.llm.metrics import LLMMetrics
    from themis_shard.llm.model import fingerprint, resolve_model_path
    from themis_shard.llm.native import NativeModel
    from themis_shard.llm.prefix_hook import build_for
    from themis_shard.llm.prefix_io import export_blob, import_blob
    from themis_shard.llm.sampling import SamplingParams
    from themis_shard.llm.scheduler import Limits
    from themis_shard.llm.sequence import DoneEvent, ErrorEvent
    from themis_shard.llm.settings import LLMSettings

    path = resolve_model_path("bundled")
    model = NativeModel(path)
    fp = fingerprint(path, model.meta)
    settings = LLMSettings(prefix_min_tokens=64, prefix_cache_bytes=1 << 30)
    cfg = EngineConfig(n_ctx=max(sizes) + 256, n_threads=threads, limits=Limits(max_running=4))
    engines = []
    for name in ("a", "b"):
        h = build_for(model, cfg, name, fp, settings)
        e = Engine(model, cfg, name=name, metrics=LLMMetrics(CollectorRegistry()), prefix=h)
        e.start()
        engines.append((e, h))
    (ea, ha), (eb, hb) = engines

    def ttft(engine, prompt) -> float:
        done = threading.Event()
        out = {}

        def sink(ev):
            if isinstance(ev, (DoneEvent, ErrorEvent)):
                out["ev"] = ev
                done.set()

        engine.submit(prompt, SamplingParams(max_tokens=1, temperature=0.0), sink)
        done.wait(600)
        return out["ev"].ttft_s

    # A loopback HTTP server serving the current blob (the transfer leg of a remote hit).
    current = {}

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            data = current["blob"]
            self.send_response(200)
            self.send_header("content-type", kv_blob.MEDIA_TYPE)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/blob"

    base = model.tokenize(
        " ".join(f"Record {i}: shard {i % 7} holds range {i * 37 % 1009}." for i in range(400))
    )
    rows = []
    loop = asyncio.new_event_loop()
    for p in sizes:
        prompt = base[:p] + model.tokenize(
            " Question: which shard holds range 74? Answer:", add_special=False
        )
        prompt = (prompt + base[p : p + 32])[: p + 32]
        cold = ttft(ea, prompt)
        hit = ttft(ea, prompt)
        # the state the cold run saved: at the prompt's last block boundary, which may lie past p
        key = ha.cache.lookup(prompt, touch=False).entry.key
        t0 = time.perf_counter()
        current["blob"] = export_blob(ha, key)
        t_export = time.perf_counter() - t0
        t0 = time.perf_counter()
        data = httpx.get(url, timeout=60).content  # the bench's own blob server, no Themis API
        t_net = time.perf_counter() - t0
        t0 = time.perf_counter()
        loop.run_until_complete(import_blob(hb, eb, data, 1 << 30))
        t_import = time.perf_counter() - t0
        remote_ttft = ttft(eb, prompt)
        remote = t_export + t_net + t_import + remote_ttft
        gain = cold - hit - t_import - t_export
        breakeven = len(data) / gain if gain > 0 else float("nan")
        rows.append((p, len(data), cold, hit, remote, t_net, t_import, breakeven, p / max(cold - hit, 1e-9)))
        hb.cache.remove(key)
    loop.close()
    srv.shutdown()
    for e, _ in engines:
        e.stop()
    model.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cluster", action="store_true", help="prefix-aware routing on a 3-shard cluster")
    ap.add_argument("--prefixes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between requests")
    ap.add_argument("--base-port", type=int, default=9670)
    args = ap.parse_args()
    if args.cluster:
        cluster_main(args)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = local_rows(sizes, args.threads)
    print(f"\nKV-prefix cache, Gemma 3 270M Q4_K_M, {args.threads} threads, prefix + 32 new tokens (TTFT, s)")
    print(
        "| prefix | state MB | cold prefill | local hit | remote hit (xfer+import+TTFT) | loopback xfer "
        "| validate+trial load | break-even bandwidth | prefill tok/s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p, nb, cold, hit, remote, net, imp, be, tps in rows:
        print(
            f"| {p} | {nb / 1e6:.1f} | {cold:.3f} | {hit:.3f} | {remote:.3f} | {net:.3f} | {imp:.3f} "
            f"| {be / 1e6:.1f} MB/s | {tps:.0f} |"
        )
    print("break-even: pulling pays when bandwidth > state bytes / (cold − local hit − import time).")


if __name__ == "__main__":
    main()
