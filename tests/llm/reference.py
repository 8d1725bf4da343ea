"""Plain llama.cpp references for the engine tests: one sequence, one context, no scheduler.

``greedy_reference`` is what "llama.cpp's plain single-sequence greedy output" means in the
spec: the prompt decoded in one batch, then one token per ``llama_decode``, argmax each time,
recording the top-2 logit margin of every choice (how close it was to a tie).
"""

from __future__ import annotations

import numpy as np
from themis_shard.llm.native import Batch, NativeContext, NativeModel
from themis_shard.llm.sampling import top2_margin


def greedy_reference(
    model: NativeModel,
    prompt: list[int],
    n: int,
    *,
    n_threads: int = 2,
    adapters: list[tuple[object, float]] | None = None,
) -> tuple[list[int], list[float]]:
    """``adapters``: (llama adapter pointer, scale) pairs applied to the reference context."""
    ctx = NativeContext(model, n_ctx=512, n_seq_max=1, n_batch=512, n_ubatch=512, n_threads=n_threads)
    if adapters:
        ctx.set_adapters(adapters)
    batch = Batch(512)
    tokens: list[int] = []
    margins: list[float] = []
    try:
        batch.add(prompt, 0, 0)
        assert ctx.decode(batch) == 0
        pos = len(prompt)
        for _ in range(n):
            row = ctx.logits(batch.n - 1)
            tok = int(np.argmax(row))
            margins.append(top2_margin(row))
            if model.is_eog(tok):
                break
            tokens.append(tok)
            batch.clear()
            batch.add([tok], pos, 0)
            assert ctx.decode(batch) == 0
            pos += 1
    finally:
        ctx.close()
    return tokens, margins


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
