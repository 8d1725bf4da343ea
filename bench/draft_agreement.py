"""How often a layer-truncated draft agrees with the full model (greedy, teacher-forced).

For each ``--keep k`` a draft with the first k blocks is derived (``llm/tools/draft_model.py``,
≈ 30 s each) into a temporary folder; along the full model's own 64-token greedy output for
each prompt of ``bench/speculative.py`` (RAG quotes and open prompts), the draft's argmax is
compared with the full model's at every position. This is the per-token acceptance rate a
greedy speculative round sees for its first draft token.

Run: `.venv/bin/python bench/draft_agreement.py [--keep 15 16 17] [--tokens 64]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shard"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.llm.reference

from speculative import OPEN, RAG
from themis_shard.llm.model import resolve_model_path
from themis_shard.llm.native import Batch, NativeContext, NativeModel, quiet_native_logs
from themis_shard.llm.tools.draft_model import derive_draft

from tests.llm.reference import greedy_reference


def argmaxes(model: NativeModel, seq: list[int], start: int) -> list[int]:
    """The model's next-token argmax at every position from ``start`` (one batch, all logits)."""
    ctx = NativeContext(model, n_ctx=1024, n_seq_max=1, n_batch=512, n_ubatch=512, n_threads=2)
    b = Batch(512)
    b.add(seq, 0, 0, logits="all")
    ctx.decode(b)
    out = [int(np.argmax(ctx.logits(i))) for i in range(start - 1, len(seq) - 1)]
    ctx.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", type=int, nargs="+", default=[15, 16, 17])
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    quiet_native_logs()
    src = resolve_model_path("bundled")
    full = NativeModel(src, n_gpu_layers=0)
    cases = []
    for kind, prompts in (("rag", RAG), ("open", OPEN)):
        for p in prompts:
            toks = full.tokenize(p)
            seq = toks + greedy_reference(full, toks, args.tokens)[0]
            cases.append((kind, seq, len(toks), argmaxes(full, seq, len(toks))))
    print(f"\ngreedy agreement of a k-layer draft with the full model ({args.tokens} tokens per prompt)\n")
    print(f"{'layers kept':>11} {'rag':>6} {'open':>6} {'all':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.keep:
            path = derive_draft(src, Path(tmp) / f"draft{k}.gguf", k)
            draft = NativeModel(path, n_gpu_layers=0)
            hits: dict[str, list[float]] = {"rag": [], "open": []}
            for kind, seq, start, ref in cases:
                got = argmaxes(draft, seq, start)
                hits[kind] += [float(a == b) for a, b in zip(got, ref, strict=True)]
            draft.close()
            every = hits["rag"] + hits["open"]
            print(f"{k:>8}/18 {np.mean(hits['rag']):6.2f} {np.mean(hits['open']):6.2f} {np.mean(every):6.2f}")


if __name__ == "__main__":
    main()
