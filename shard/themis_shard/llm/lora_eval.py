"""The evaluation hook of a loaded adapter: accuracy and latency deltas against the base model.

These two numbers are what the gossip ``AdapterCapabilityAnnouncement`` carries (paper §IV-A):
``accuracy_delta`` — how much more likely the adapter makes the reference completions of a
validation set (mean per-token probability, adapter minus base, in [-1, 1]) — and
``performance_delta_p99_ms`` — the p99 single-token decode latency it adds. It runs on its own
small context in a worker thread, so serving continues meanwhile. Both are measured on the
adapter's held-out set for its domain (what the shard's composition root resolves for it: the set
the adapter file carries, else the shipped set of its domain), so α means what the paper says.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .native import Batch, NativeContext, NativeModel, decode_or_raise
from .settings import LLMSettings

BUILTIN_VALIDATION = [
    ("The capital of France is", " Paris."),
    ("Water freezes at a temperature of", " zero degrees Celsius."),
    ("The largest planet in our solar system is", " Jupiter."),
    ("A contract is a legally binding", " agreement between two or more parties."),
    ("The patient was prescribed antibiotics to treat the", " bacterial infection."),
    ("def add(a, b):\n    return", " a + b"),
]


def load_validation_set(path: str) -> list[tuple[str, str]]:
    if not path:
        return list(BUILTIN_VALIDATION)
    pairs = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            pairs.append((str(item["prompt"]), str(item["completion"])))
    return pairs


def completion_logprob(ctx: NativeContext, batch: Batch, prompt: list[int], completion: list[int]) -> float:
    """Mean log-probability per token of ``completion`` after ``prompt`` (teacher forcing)."""
    ctx.clear()
    batch.clear()
    batch.add(prompt + completion, 0, 0, logits="all")
    decode_or_raise(ctx, batch, "scoring")
    total = 0.0
    for j, tok in enumerate(completion):
        row = ctx.logits(len(prompt) - 1 + j).astype(np.float64)
        m = row.max()
        total += row[tok] - m - np.log(np.exp(row - m).sum())
    return total / max(1, len(completion))


def decode_latencies(ctx: NativeContext, batch: Batch, prompt: list[int], steps: int) -> list[float]:
    ctx.clear()
    batch.clear()
    batch.add(prompt, 0, 0)
    decode_or_raise(ctx, batch, "timing decodes")
    out, tok, pos = [], int(np.argmax(ctx.logits(batch.n - 1))), len(prompt)
    for _ in range(steps):
        batch.clear()
        batch.add([tok], pos, 0)
        t = time.perf_counter()
        decode_or_raise(ctx, batch, "timing decodes")  # a failed decode's time is no latency
        out.append(time.perf_counter() - t)
        tok, pos = int(np.argmax(ctx.logits(0))), pos + 1
    return out


def evaluate_adapter(
    model: NativeModel,
    adapter: object,
    scale: float,
    settings: LLMSettings,
    *,
    pairs: Sequence[tuple[str, str]] | None = None,
    set_name: str = "",
    latency_steps: int = 16,
) -> dict:
    """``pairs``: the adapter's own held-out set (its domain's); None: the shard's configured set
    (``adapter_validation_set``) or the built-in generic one."""
    if not pairs:
        pairs, set_name = (
            load_validation_set(settings.adapter_validation_set),
            settings.adapter_validation_set or "builtin",
        )
    pairs = list(pairs)
    encoded = [(model.tokenize(p), model.tokenize(c, add_special=False)) for p, c in pairs]
    longest = max(len(p) + len(c) for p, c in encoded)
    n_ctx = max(256, longest + latency_steps + 8)
    ctx = NativeContext(
        model,
        n_ctx=n_ctx,
        n_seq_max=1,
        n_batch=n_ctx,
        n_ubatch=min(512, n_ctx),
        n_threads=settings.n_threads or (os.cpu_count() or 1),
    )
    batch = Batch(n_ctx)
    try:
        results = {}
        for label, adapters in (("base", []), ("adapter", [(adapter, scale)])):
            ctx.set_adapters(adapters)
            lps = [completion_logprob(ctx, batch, p, c) for p, c in encoded]
            lat = decode_latencies(ctx, batch, encoded[0][0], latency_steps)
            results[label] = (np.exp(lps), float(np.percentile(lat, 99)) * 1000)
        (p_base, lat_base), (p_ad, lat_ad) = results["base"], results["adapter"]
        return {
            "accuracy_delta": float(np.mean(p_ad - p_base)),
            "base_token_probability": float(np.mean(p_base)),
            "adapter_token_probability": float(np.mean(p_ad)),
            "performance_delta_p99_ms": lat_ad - lat_base,
            "base_p99_ms": lat_base,
            "adapter_p99_ms": lat_ad,
            "validation_items": len(pairs),
            "validation_set": set_name,
            "evaluated_at": time.time(),
        }
    finally:
        ctx.close()
