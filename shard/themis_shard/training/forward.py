"""Gemma 3's forward pass in numpy, as llama.cpp computes it (``llm_build_gemma3``), for training.

Weights are dequantised from the GGUF on load (``gguf.dequantize``), once per trainer. Only what
training needs: the activations entering the last block's ``ffn_down`` and the residual around it
(``prefix``), and the head (final norm + tied output embedding). Sequences are short (< the
512-token sliding window), so local and global layers differ only in their RoPE base.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Every 6th layer attends globally with the model's RoPE base; the others use the local base.
SWA_PATTERN = 6
LOCAL_ROPE_BASE = 10_000.0


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))


def rope_neox(x: np.ndarray, base: float) -> np.ndarray:
    """x: (T, heads, d); NEOX rotation of the pairs (i, i + d/2) by position."""
    t, _, d = x.shape
    half = d // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / d)
    ang = np.arange(t, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@dataclass
class Prefix:
    """What the frozen part of the model yields for one text."""

    tokens: np.ndarray  # (T,)
    ffn_act: np.ndarray  # (T, n_ff): the input of the last block's ffn_down
    down: np.ndarray  # (T, n_embd): ffn_down's output (base weights)
    residual: np.ndarray  # (T, n_embd): the last block's attention output + residual (sa_out)


class GemmaWeights:
    def __init__(self, path: Path, cache_dir: Path | None = None) -> None:
        """``cache_dir``: where dequantised tensors are kept (.npy, memory-mapped) across trainers —
        dequantising the model in numpy takes minutes on 2 loaded cores, loading it back a second."""
        import gguf

        st = path.stat()
        self._cache_dir = cache_dir / f"{path.stem}-{st.st_size}-{int(st.st_mtime)}" if cache_dir else None

        reader = gguf.GGUFReader(str(path))
        meta = {
            k: f.contents()
            for k, f in reader.fields.items()
            if f.types and f.types[0] != gguf.GGUFValueType.ARRAY
        }
        arch = meta["general.architecture"]
        if arch != "gemma3":
            raise ValueError(f"training supports gemma3 models, not {arch!r}")
        self.architecture = arch
        self.n_layer = int(meta[f"{arch}.block_count"])
        self.n_head = int(meta[f"{arch}.attention.head_count"])
        self.n_head_kv = int(meta[f"{arch}.attention.head_count_kv"])
        self.head_dim = int(meta[f"{arch}.attention.key_length"])
        self.n_embd = int(meta[f"{arch}.embedding_length"])
        self.eps = float(meta[f"{arch}.attention.layer_norm_rms_epsilon"])
        self.rope_base = float(meta.get(f"{arch}.rope.freq_base", 1e6))
        self._tensors = {t.name: t for t in reader.tensors}
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        w = self._cache.get(name)
        if w is None:
            import gguf

            file = self._cache_dir / f"{name}.npy" if self._cache_dir else None
            if file is not None and file.is_file():
                w = np.load(file, mmap_mode="r")
            else:
                t = self._tensors[name]
                w = gguf.dequantize(t.data, t.tensor_type).astype(np.float32)
                w = w.reshape([int(n) for n in reversed(t.shape)]) if w.ndim == 1 and len(t.shape) > 1 else w
                if file is not None:
                    file.parent.mkdir(parents=True, exist_ok=True)
                    # Shards share the cache and dequantise at the same moment: each writes a
                    # file of its own and renames it whole (one shared temporary name let one
                    # shard truncate what another was about to rename: wrong weights).
                    tmp = file.with_name(f".{file.stem}.{os.getpid()}.{threading.get_ident()}.tmp.npy")
                    np.save(tmp, w)
                    os.replace(tmp, file)
            self._cache[name] = w
        return w

    def last(self) -> int:
        return self.n_layer - 1


def attention(w: GemmaWeights, il: int, x: np.ndarray) -> np.ndarray:
    t = x.shape[0]
    p = f"blk.{il}."
    hd = w.head_dim
    q = (x @ w[p + "attn_q.weight"].T).reshape(t, w.n_head, hd)
    k = (x @ w[p + "attn_k.weight"].T).reshape(t, w.n_head_kv, hd)
    v = (x @ w[p + "attn_v.weight"].T).reshape(t, w.n_head_kv, hd)
    q = rms_norm(q, w[p + "attn_q_norm.weight"], w.eps)
    k = rms_norm(k, w[p + "attn_k_norm.weight"], w.eps)
    base = w.rope_base if (il + 1) % SWA_PATTERN == 0 else LOCAL_ROPE_BASE
    q, k = rope_neox(q, base), rope_neox(k, base)
    q = q / np.sqrt(hd)
    group = w.n_head // w.n_head_kv
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k)
    scores = scores + np.triu(np.full((t, t), -np.inf, np.float32), 1)[None]
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    scores /= scores.sum(-1, keepdims=True)
    out = np.einsum("hts,shd->thd", scores, v).reshape(t, w.n_head * hd)
    return out @ w[p + "attn_output.weight"].T


def ffn_act(w: GemmaWeights, il: int, x: np.ndarray) -> np.ndarray:
    p = f"blk.{il}."
    return gelu_tanh(x @ w[p + "ffn_gate.weight"].T) * (x @ w[p + "ffn_up.weight"].T)


def prefix(w: GemmaWeights, tokens: list[int]) -> Prefix:
    """Run every block but the last one's ffn_down onwards (the frozen part) for ``tokens``."""
    toks = np.asarray(tokens, dtype=np.int64)
    emb = w["token_embd.weight"]
    h = emb[toks] * np.float32(np.sqrt(w.n_embd))
    for il in range(w.n_layer):
        p = f"blk.{il}."
        a = attention(w, il, rms_norm(h, w[p + "attn_norm.weight"], w.eps))
        sa = h + rms_norm(a, w[p + "post_attention_norm.weight"], w.eps)
        act = ffn_act(w, il, rms_norm(sa, w[p + "ffn_norm.weight"], w.eps))
        down = act @ w[p + "ffn_down.weight"].T
        if il == w.last():
            return Prefix(toks, act, down, sa)
        h = sa + rms_norm(down, w[p + "post_ffw_norm.weight"], w.eps)
    raise AssertionError("unreachable")


def logits(w: GemmaWeights, pre: Prefix, down: np.ndarray | None = None) -> np.ndarray:
    """The head over the last block's ffn_down output (``down``: adapted; None: the base)."""
    p = f"blk.{w.last()}."
    d = pre.down if down is None else down
    out = pre.residual + rms_norm(d, w[p + "post_ffw_norm.weight"], w.eps)
    return rms_norm(out, w["output_norm.weight"], w.eps) @ w["token_embd.weight"].T
