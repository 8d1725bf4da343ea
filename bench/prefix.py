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
"""

from __future__ import annotations

import argparse
import asyncio
import http.server
import threading
import time

import httpx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

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
    cfg = EngineConfig(n_ctx=max(sizes) + 256, n_threads=args.threads, limits=Limits(max_running=4))
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
        key = ha.cache.hashes(prompt, p)[-1]
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
    for e, _ in engines:
        e.stop()
    model.close()


if __name__ == "__main__":
    main()
