"""Train a LoRA on texts (next-token loss) and write it as a llama.cpp LoRA GGUF.

The adapted weight is the last block's ``ffn_down`` (see the package docstring): its input and
the residual around it are computed once per text by the frozen prefix, so a step costs the head
(final norm + the tied 262k-token output embedding) forward and backward for the batch. Standard
LoRA: ``ΔW = (alpha / rank) · B A`` with A Gaussian and B zero at start, Adam on A and B.
The file carries what the shard announces about it: ``themis.training_samples``,
``themis.federation_round``, ``themis.domain`` and the held-out set it is evaluated on
(``themis.validation``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .forward import GemmaWeights, Prefix, prefix, rms_norm


@dataclass
class LoraWeights:
    """One adapted weight: A (rank, n_in), B (n_out, rank); the delta is scale · B A."""

    target: str
    a: np.ndarray
    b: np.ndarray
    alpha: float

    @property
    def rank(self) -> int:
        return int(self.a.shape[0])

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


@dataclass
class TrainResult:
    lora: LoraWeights
    samples: int
    losses: list[float] = field(default_factory=list)


def _rms_backward(x: np.ndarray, weight: np.ndarray, eps: float, grad_out: np.ndarray) -> np.ndarray:
    """d/dx of rms_norm(x) * weight, given d/d(out)."""
    r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    n = x / r
    dn = grad_out * weight
    return (dn - n * np.mean(dn * n, axis=-1, keepdims=True)) / r


def loss_and_grads(
    w: GemmaWeights, pre: Prefix, lora: LoraWeights
) -> tuple[float, np.ndarray, np.ndarray, int]:
    """Summed next-token cross-entropy of one text under the adapter, its gradients for A and B,
    and the number of predicted tokens."""
    last = f"blk.{w.last()}."
    g_post, g_out, emb = w[last + "post_ffw_norm.weight"], w["output_norm.weight"], w["token_embd.weight"]
    act = pre.ffn_act[:-1]
    h = act @ lora.a.T  # (T, r)
    y = pre.down[:-1] + lora.scale * (h @ lora.b.T)
    o = pre.residual[:-1] + rms_norm(y, g_post, w.eps)
    f = rms_norm(o, g_out, w.eps)
    logits = f @ emb.T
    targets = pre.tokens[1:]
    logits -= logits.max(axis=-1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=-1, keepdims=True)
    n = len(targets)
    loss = float(-np.log(p[np.arange(n), targets] + 1e-30).sum())
    p[np.arange(n), targets] -= 1.0  # d loss / d logits
    df = p @ emb
    do = _rms_backward(o, g_out, w.eps, df)
    dy = _rms_backward(y, g_post, w.eps, do)
    grad_b = lora.scale * dy.T @ h
    grad_a = lora.scale * (dy @ lora.b).T @ act
    return loss, grad_a, grad_b, n


def init_lora(w: GemmaWeights, rank: int, alpha: float, seed: int) -> LoraWeights:
    last = w.last()
    target = f"blk.{last}.ffn_down.weight"
    n_out, n_in = w[target].shape
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((rank, n_in)) / np.sqrt(n_in)).astype(np.float32)
    return LoraWeights(target, a, np.zeros((n_out, rank), np.float32), alpha)


def encode(
    w: GemmaWeights, tokenize: Callable[[str], list[int]], texts: Sequence[str], max_tokens: int
) -> list[Prefix]:
    """The frozen prefix of each text (texts of fewer than 2 tokens teach nothing: skipped)."""
    out = []
    for t in texts:
        toks = tokenize(t)[:max_tokens]
        if len(toks) >= 2:
            out.append(prefix(w, toks))
    return out


def train(
    w: GemmaWeights,
    prefixes: Sequence[Prefix],
    *,
    steps: int,
    start: LoraWeights | None = None,
    rank: int = 8,
    alpha: float = 8.0,
    lr: float = 2e-3,
    batch: int = 4,
    seed: int = 0,
) -> TrainResult:
    """``steps`` Adam steps over mini-batches of ``batch`` texts (cycling), from ``start`` (a
    federated round's adapter) or a fresh LoRA."""
    if not prefixes:
        raise ValueError("nothing to train on")
    lora = start or init_lora(w, rank, alpha, seed)
    lora = LoraWeights(lora.target, lora.a.copy(), lora.b.copy(), lora.alpha)
    m = [np.zeros_like(lora.a), np.zeros_like(lora.b)]
    v = [np.zeros_like(lora.a), np.zeros_like(lora.b)]
    b1, b2, eps = 0.9, 0.999, 1e-8
    order = np.random.default_rng(seed).permutation(len(prefixes))
    losses: list[float] = []
    for step in range(steps):
        chosen = [
            prefixes[order[(step * batch + i) % len(prefixes)]] for i in range(min(batch, len(prefixes)))
        ]
        total, ga, gb, count = 0.0, np.zeros_like(lora.a), np.zeros_like(lora.b), 0
        for pre in chosen:
            loss, da, db, n = loss_and_grads(w, pre, lora)
            total, ga, gb, count = total + loss, ga + da, gb + db, count + n
        losses.append(total / count)
        for i, (param, grad) in enumerate(((lora.a, ga / count), (lora.b, gb / count))):
            m[i] = b1 * m[i] + (1 - b1) * grad
            v[i] = b2 * v[i] + (1 - b2) * grad * grad
            mh, vh = m[i] / (1 - b1 ** (step + 1)), v[i] / (1 - b2 ** (step + 1))
            param -= (lr * mh / (np.sqrt(vh) + eps)).astype(np.float32)
    return TrainResult(lora, len(prefixes), losses)


def mean_loss(w: GemmaWeights, prefixes: Sequence[Prefix], lora: LoraWeights | None) -> float:
    """Mean next-token loss per token (the base model when ``lora`` is None)."""
    zero = None
    total = count = 0.0
    for pre in prefixes:
        if lora is None:
            if zero is None:
                n_out, n_in = pre.down.shape[1], pre.ffn_act.shape[1]
                zero = LoraWeights("", np.zeros((1, n_in), np.float32), np.zeros((n_out, 1), np.float32), 1.0)
            use = zero
        else:
            use = lora
        loss, _, _, n = loss_and_grads(w, pre, use)
        total, count = total + loss, count + n
    return total / max(count, 1)


def write_lora_gguf(
    path: Path,
    architecture: str,
    lora: LoraWeights,
    *,
    name: str,
    domain: str | None,
    training_samples: int,
    federation_round: int,
    validation: Sequence[tuple[str, str]] = (),
) -> Path:
    """llama.cpp's LoRA GGUF: general.type=adapter, adapter.type=lora, adapter.lora.alpha, and
    ``<weight>.lora_a`` (rank, n_in) / ``<weight>.lora_b`` (n_out, rank) as f32."""
    import gguf

    tmp = path.with_suffix(".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch=architecture)
    writer.add_string("general.type", "adapter")
    writer.add_string("general.name", name)
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(lora.alpha))
    writer.add_uint32("themis.training_samples", int(training_samples))
    writer.add_uint32("themis.federation_round", int(federation_round))
    if domain:
        writer.add_string("themis.domain", domain)
    if validation:
        lines = "\n".join(json.dumps({"prompt": p, "completion": c}) for p, c in validation)
        writer.add_string("themis.validation", lines)
    writer.add_tensor(f"{lora.target}.lora_a", np.ascontiguousarray(lora.a, np.float32))
    writer.add_tensor(f"{lora.target}.lora_b", np.ascontiguousarray(lora.b, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


def read_lora_gguf(path: Path) -> tuple[LoraWeights, dict]:
    """The adapted weight and the scalar metadata of a LoRA GGUF this module wrote."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    meta = {
        k: f.contents()
        for k, f in reader.fields.items()
        if f.types and f.types[0] != gguf.GGUFValueType.ARRAY
    }
    tensors = {
        t.name: np.asarray(t.data, np.float32).reshape([int(n) for n in reversed(t.shape)])
        for t in reader.tensors
    }
    a_name = next(n for n in tensors if n.endswith(".lora_a"))
    target = a_name.removesuffix(".lora_a")
    return LoraWeights(
        target, tensors[a_name], tensors[target + ".lora_b"], float(meta["adapter.lora.alpha"])
    ), meta
