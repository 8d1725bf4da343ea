"""LoRA training on a shard's own documents, in numpy over weights dequantised from the GGUF.

Why numpy: the stack had to run on 2 shared cores with no new heavy dependency. PyTorch's only
offline wheel here is for Python 3.11 (the shards run 3.12: it would be a multi-GB CUDA download),
JAX is ~600 MB; numpy and gguf are already dependencies. The price is that gradients are written
by hand, so the adapted weights are the ones whose gradient is short: the last block's
``ffn_down`` (the frozen prefix is computed once per text and cached, see ``forward``).
"""
