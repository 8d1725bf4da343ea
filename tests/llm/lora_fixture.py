"""Write a small, valid GGUF LoRA adapter for a llama.cpp model (test fixture / smoke adapter).

Test-only: the shard never writes adapters, so this lives with the specs (bench and e2e import
it from here too).

The shapes come from the base model's metadata (no weights are read), and the adapter follows
llama.cpp's format: ``general.type=adapter``, ``adapter.type=lora``, ``adapter.lora.alpha`` (f32),
and for every adapted weight ``<base>.lora_a`` of shape (r, n_in) and ``<base>.lora_b`` of shape
(n_out, r). ``B`` is not zero (unlike a freshly initialised LoRA) so the adapter changes logits.

    python -m tests.llm.lora_fixture out.gguf [--model PATH] [--rank 4] [--layers 0-17]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class AttentionShapes:
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_layer: int

    @classmethod
    def from_meta(cls, meta: Callable[[str], str | None]) -> AttentionShapes:
        arch = meta("general.architecture") or ""

        def num(key: str, default: int | None = None) -> int:
            v = meta(f"{arch}.{key}")
            if v is None:
                if default is None:
                    raise ValueError(f"model metadata lacks {arch}.{key}")
                return default
            return int(v)

        n_embd, n_head = num("embedding_length"), num("attention.head_count")
        k = num("attention.key_length", n_embd // n_head)
        return cls(
            n_embd=n_embd,
            n_head=n_head,
            n_head_kv=num("attention.head_count_kv", n_head),
            head_dim_k=k,
            head_dim_v=num("attention.value_length", k),
            n_layer=num("block_count"),
        )

    def targets(self, layers: Iterable[int]) -> dict[str, tuple[int, int]]:
        """Adapted weight → (n_out, n_in): the attention projections of the chosen layers."""
        out = {}
        for i in layers:
            out[f"blk.{i}.attn_q.weight"] = (self.n_head * self.head_dim_k, self.n_embd)
            out[f"blk.{i}.attn_k.weight"] = (self.n_head_kv * self.head_dim_k, self.n_embd)
            out[f"blk.{i}.attn_v.weight"] = (self.n_head_kv * self.head_dim_v, self.n_embd)
            out[f"blk.{i}.attn_output.weight"] = (self.n_embd, self.n_head * self.head_dim_v)
        return out


def write_lora(
    path: Path,
    architecture: str,
    targets: dict[str, tuple[int, int]],
    *,
    rank: int = 4,
    alpha: float = 8.0,
    std: float = 0.05,
    seed: int = 0,
    name: str = "themis-test-lora",
) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch=architecture)
    writer.add_string("general.type", "adapter")
    writer.add_string("general.name", name)
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(alpha))
    for base, (n_out, n_in) in targets.items():
        writer.add_tensor(f"{base}.lora_a", (rng.standard_normal((rank, n_in)) * std).astype(np.float32))
        writer.add_tensor(f"{base}.lora_b", (rng.standard_normal((n_out, rank)) * std).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def make_test_lora(
    path: Path,
    meta: Callable[[str], str | None],
    *,
    rank: int = 4,
    layers: Iterable[int] | None = None,
    alpha: float = 8.0,
    std: float = 0.05,
    seed: int = 0,
) -> Path:
    shapes = AttentionShapes.from_meta(meta)
    chosen = range(shapes.n_layer) if layers is None else layers
    return write_lora(
        path,
        meta("general.architecture") or "",
        shapes.targets(chosen),
        rank=rank,
        alpha=alpha,
        std=std,
        seed=seed,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="bundled", help="GGUF path or 'bundled'")
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=8.0)
    ap.add_argument("--std", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", default="", help="e.g. 0-5 (default: all)")
    args = ap.parse_args(argv)
    from themis_shard.llm.model import resolve_model_path
    from themis_shard.llm.native import NativeModel

    model = NativeModel(resolve_model_path(args.model))
    layers = None
    if args.layers:
        lo, _, hi = args.layers.partition("-")
        layers = range(int(lo), int(hi or lo) + 1)
    make_test_lora(
        args.out, model.meta, rank=args.rank, layers=layers, alpha=args.alpha, std=args.std, seed=args.seed
    )
    model.close()
    print(args.out)


if __name__ == "__main__":
    main()
