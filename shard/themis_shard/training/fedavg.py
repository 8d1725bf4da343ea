"""FedAvg over LoRA factors: the average of the shards' A and B, weighted by their sample counts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .lora import LoraWeights


def fedavg(updates: Sequence[tuple[LoraWeights, int]]) -> tuple[LoraWeights, int]:
    """The weighted mean of same-shaped adapters, and the total sample count it stands for."""
    if not updates:
        raise ValueError("no updates to average")
    first = updates[0][0]
    for lw, n in updates:
        if lw.target != first.target or lw.a.shape != first.a.shape or lw.b.shape != first.b.shape:
            raise ValueError("updates adapt different weights or ranks")
        if n <= 0:
            raise ValueError("every update needs a positive sample count")
    total = sum(n for _, n in updates)
    a = sum(lw.a.astype(np.float64) * (n / total) for lw, n in updates)
    b = sum(lw.b.astype(np.float64) * (n / total) for lw, n in updates)
    return LoraWeights(first.target, a.astype(np.float32), b.astype(np.float32), first.alpha), total
