"""The start-up probe's child: load a model and run one real forward pass, as the shard's warm-up would.

Run by cpu_probe.run_probe in its own process, so that a signal (SIGSEGV, SIGILL) from an
unsupported instruction kills only the child. Exit 0 means the configuration is safe.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import llama_cpp as L

from .native import Batch, NativeContext, NativeModel


def main(argv: list[str]) -> int:
    """Load the model and run one real forward pass, as the shard's warm-up would."""
    ap = argparse.ArgumentParser(prog="python -m themis_shard.llm.cpu_probe_child")
    ap.add_argument("model", type=Path)
    ap.add_argument("--extra-bufts", type=int, choices=(0, 1), default=1)
    ap.add_argument("--gpu-layers", type=int, default=-1)
    ap.add_argument("--embedding", action="store_true")
    ap.add_argument("--fault", default="", help="raise this signal before the forward pass (drills, tests)")
    args = ap.parse_args(argv)

    model = NativeModel(args.model, n_gpu_layers=args.gpu_layers, use_extra_bufts=bool(args.extra_bufts))
    args.embedding = args.embedding or "bert" in (model.meta("general.architecture") or "")
    ctx = NativeContext(
        model, n_ctx=64, n_seq_max=1, n_batch=64, n_ubatch=64, n_threads=min(2, os.cpu_count() or 1),
        embeddings=args.embedding, pooling=L.LLAMA_POOLING_TYPE_MEAN if args.embedding else None,
    )  # fmt: skip
    tokens = model.tokenize("The capital of France is")[:32]
    batch = Batch(64)
    batch.add(tokens, 0, 0, logits="all" if args.embedding else "last")
    if args.fault:
        os.kill(os.getpid(), signal.Signals[args.fault])
    rc = ctx.encode(batch) if args.embedding else ctx.decode(batch)
    if rc != 0:
        print(f"forward pass returned {rc}", file=sys.stderr)
        return 3
    if not args.embedding:  # one decode step on top, as generation does
        batch.clear()
        batch.add([tokens[-1]], len(tokens), 0)
        if ctx.decode(batch) != 0:
            print("decode step failed", file=sys.stderr)
            return 3
    ctx.close()
    model.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
