"""What llama.cpp's extra buffer types (weight repacking) are worth on this machine.

The shard's start-up probe (llm/cpu_probe.py) keeps them on unless a decode with them crashes;
this measures what the fallback costs: prompt processing (pp) and token generation (tg) of the
bundled model with repacking on and off, llama-bench style, rounds interleaved (on, off, off, on,
…) so that both see the same background load. Also prints the build's compiled-in CPU features
and whether this CPU advertises AMX.

Run: `.venv/bin/python bench/repack.py [--rounds 3] [--pp 128] [--tg 64]`.
"""

from __future__ import annotations

import argparse
import os
import time

import llama_cpp as L
import numpy as np
from themis_shard.llm.cpu_probe import machine_flags
from themis_shard.llm.model import resolve_model_path
from themis_shard.llm.native import Batch, NativeContext, NativeModel


def measure(model: NativeModel, threads: int, pp: int, tg: int) -> tuple[float, float]:
    ctx = NativeContext(model, n_ctx=1024, n_seq_max=1, n_batch=512, n_ubatch=512, n_threads=threads)
    batch = Batch(512)
    prompt = [int(t) for t in np.random.default_rng(0).integers(100, 20000, pp)]
    try:
        batch.add(prompt[:8], 0, 0)  # warm-up: graph allocation
        ctx.decode(batch)
        ctx.clear()
        batch.clear()
        batch.add(prompt, 0, 0)
        t0 = time.perf_counter()
        assert ctx.decode(batch) == 0
        pp_s = pp / (time.perf_counter() - t0)
        tok, pos = int(np.argmax(ctx.logits(batch.n - 1))), pp
        t0 = time.perf_counter()
        for _ in range(tg):
            batch.clear()
            batch.add([tok], pos, 0)
            assert ctx.decode(batch) == 0
            tok, pos = int(np.argmax(ctx.logits(0))), pos + 1
        tg_s = tg / (time.perf_counter() - t0)
    finally:
        ctx.close()
    return pp_s, tg_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pp", type=int, default=128)
    ap.add_argument("--tg", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    path = resolve_model_path("bundled")
    models = {on: NativeModel(path, n_gpu_layers=0, use_extra_bufts=on) for on in (True, False)}
    best: dict[bool, list[float]] = {True: [0.0, 0.0], False: [0.0, 0.0]}
    for r in range(args.rounds):
        for on in (True, False) if r % 2 == 0 else (False, True):
            pp_s, tg_s = measure(models[on], args.threads, args.pp, args.tg)
            best[on] = [max(best[on][0], pp_s), max(best[on][1], tg_s)]
    for m in models.values():
        m.close()
    flags = machine_flags()
    print(f"\nbuild: {L.llama_print_system_info().decode().strip()}")
    amx = "advertised" if {"amx_tile", "amx_int8"} & flags else "not advertised"
    avx512 = "yes" if "avx512f" in flags else "no"
    print(f"CPU: AMX {amx}, AVX-512 {avx512}; {args.threads} threads, best of {args.rounds}\n")
    print(f"| extra buffer types | pp{args.pp} tok/s | tg{args.tg} tok/s |")
    print("|--------------------|-----------:|----------:|")
    for on in (True, False):
        label = "on (repacking)" if on else "off (fallback)"
        print(f"| {label:<18} | {best[on][0]:10.1f} | {best[on][1]:9.1f} |")
    print(f"\nrepacking: pp ×{best[True][0] / best[False][0]:.2f}, tg ×{best[True][1] / best[False][1]:.2f}")


if __name__ == "__main__":
    main()
