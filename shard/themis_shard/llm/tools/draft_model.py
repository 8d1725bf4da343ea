"""Derive a draft model from a GGUF by keeping its first k transformer blocks (``gguf`` package).
(≈ 30 s for the bundled model here, almost all of it ``GGUFReader`` parsing the vocabulary.)

The draft shares the verify model's tokenizer, embeddings and output head, so its tokens and
probabilities live in the same vocabulary; only ``blk.{k..n-1}.*`` tensors are dropped and
``{arch}.block_count`` becomes k. Greedy agreement with the full model along its own output
(teacher-forced, 64 tokens × 5 prompts; ``bench/draft_agreement.py``): 15 of 18 layers 82 %
(89–97 % on quoting prompts), 16: 85 %, 17: 95 %; 12 or fewer ≈ 0 %. ARCHITECTURE §3's
"96 % with 15 layers" was a quoting prompt. Speculative
acceptance (accepted / drafted) is lower than agreement — every draft token after the first
rejection of a round counts as drafted and not accepted: ≈ 0.55–0.65 at n_draft = 4.
On CPU no layer-truncated draft of this model pays: the 262k-row output head (168M of 268M
parameters) stays whole, so one draft token costs ≥ 0.6 of a target token.

The file records what it is a draft of (our fingerprint, carried in GGUF metadata):
``themis.draft.of.sha256`` / ``.name`` / ``.n_layers`` and ``themis.draft.keep_layers``;
``draft_info(path)`` reads them back and ``LocalDraftModel`` refuses a draft of another model.

Run: ``python -m themis_shard.llm.tools.draft_model SRC.gguf OUT.gguf --keep 15``
(SRC may be ``bundled``).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ..model import resolve_model_path, sha256_file
from ..native import NativeModel

DRAFT_OF_SHA = "themis.draft.of.sha256"
DRAFT_OF_NAME = "themis.draft.of.name"
DRAFT_OF_LAYERS = "themis.draft.of.n_layers"
DRAFT_KEEP = "themis.draft.keep_layers"
_BLOCK = re.compile(r"^blk\.(\d+)\.")


def derive_draft(src: Path, out: Path, keep: int) -> Path:
    import gguf  # only the tool writes GGUFs; the engine imports this module for draft_info_from_meta

    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    n_layers = int(reader.fields[f"{arch}.block_count"].contents())
    if not 1 <= keep < n_layers:
        raise ValueError(f"keep must be within [1, {n_layers - 1}] for a {n_layers}-layer model")
    name_field = reader.fields.get("general.name")
    src_name = name_field.contents() if name_field is not None else src.stem
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(out), arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == f"{arch}.block_count":
            value = keep
        elif field.name == "general.name":
            value = f"{src_name} (draft: {keep}/{n_layers} layers)"
        elif (
            vtype == gguf.GGUFValueType.ARRAY
            and isinstance(value, list)
            and len(value) == n_layers
            and field.name.startswith(f"{arch}.")
        ):
            value = value[:keep]  # per-layer hyperparameters (if the architecture has any)
        writer.add_key_value(field.name, value, vtype, sub_type=sub)
    writer.add_string(DRAFT_OF_SHA, sha256_file(src))
    writer.add_string(DRAFT_OF_NAME, str(src_name))
    writer.add_uint32(DRAFT_OF_LAYERS, n_layers)
    writer.add_uint32(DRAFT_KEEP, keep)
    kept = [t for t in reader.tensors if not ((m := _BLOCK.match(t.name)) and int(m.group(1)) >= keep)]
    for t in kept:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in kept:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    return out


def draft_info(path: Path) -> dict | None:
    """The draft's provenance, or None when the file is not a draft made by this tool (read
    through llama.cpp's loader: ``gguf.GGUFReader`` parses the 262k-token vocabulary, ~25 s)."""
    m = NativeModel(Path(path), n_gpu_layers=0)
    try:
        return draft_info_from_meta(m.meta)
    finally:
        m.close()


def draft_info_from_meta(meta) -> dict | None:
    """``meta``: key → value string (``NativeModel.meta``)."""
    sha = meta(DRAFT_OF_SHA)
    if not sha:
        return None
    return {
        "of_sha256": sha,
        "of_name": meta(DRAFT_OF_NAME) or "",
        "of_n_layers": int(meta(DRAFT_OF_LAYERS) or 0),
        "keep_layers": int(meta(DRAFT_KEEP) or 0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="verify model GGUF, or 'bundled'")
    ap.add_argument("out", type=Path)
    ap.add_argument("--keep", type=int, default=15, help="transformer blocks kept (default 15)")
    args = ap.parse_args()
    out = derive_draft(resolve_model_path(args.src), args.out, args.keep)
    print(out, draft_info(out))


if __name__ == "__main__":
    main()
