"""Thin, typed wrappers over llama-cpp-python's low-level (ctypes) API.

The high-level ``Llama`` class decodes sequence 0 only, so the engine talks to llama.cpp
directly: a model, contexts with many sequence slots, and a ``Batch`` whose arrays are numpy
buffers shared with C (filled with slice assignments, no per-token ctypes calls). Everything
that touches a raw pointer lives here.
"""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import llama_cpp as L
import numpy as np

from .cpu_probe import default_policy
from .model import ModelError


def quiet_native_logs(level: int = logging.ERROR) -> None:
    """llama.cpp prints load logs through llama-cpp-python's logger: keep errors only."""
    logging.getLogger("llama-cpp-python").setLevel(level)


def gpu_layers(requested: int) -> int:
    """-1 means every layer when a GPU backend is compiled in, else CPU."""
    if requested >= 0:
        return requested
    return 999 if L.llama_supports_gpu_offload() else 0


class NativeModel:
    """Weights + vocabulary of one GGUF file."""

    def __init__(self, path: Path, *, n_gpu_layers: int = -1, use_extra_bufts: bool | None = None) -> None:
        """``use_extra_bufts=None`` asks the start-up probe (cpu_probe.py) whether repacking is safe."""
        quiet_native_logs()
        L.llama_backend_init()
        params = L.llama_model_default_params()
        params.n_gpu_layers = gpu_layers(n_gpu_layers)
        if use_extra_bufts is None:
            decision = default_policy().for_model(Path(path), n_gpu_layers=n_gpu_layers)
            use_extra_bufts = decision.use_extra_bufts
        params.use_extra_bufts = use_extra_bufts
        self.use_extra_bufts = use_extra_bufts
        self.n_gpu_layers = params.n_gpu_layers
        ptr = L.llama_model_load_from_file(str(path).encode(), params)
        if not ptr:
            raise ModelError(f"llama.cpp could not load {path}")
        self.ptr = ptr
        self.path = path
        self.vocab = L.llama_model_get_vocab(ptr)
        self.n_vocab = int(L.llama_vocab_n_tokens(self.vocab))
        self.n_embd = int(L.llama_model_n_embd(ptr))
        self._pieces: dict[int, bytes] = {}

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (L.llama_token * cap)()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (L.llama_token * cap)()
            n = L.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """Bytes of one token (cached: the engine asks for the same pieces over and over)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = L.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = L.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
        out = buf.raw[:n]
        self._pieces[token] = out
        return out

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        return bool(L.llama_vocab_is_eog(self.vocab, token))

    def eos_text(self) -> str:
        """The end-of-sequence token as text (templates print it after an assistant turn)."""
        return self.piece(int(L.llama_vocab_eos(self.vocab))).decode("utf-8", errors="replace")

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(256)
        n = L.llama_model_meta_val_str(self.ptr, key.encode(), buf, 256)
        return buf.value.decode() if n >= 0 else None

    def chat_template(self) -> str | None:
        t = L.llama_model_chat_template(self.ptr, None)
        return t.decode() if t else None

    def apply_chat_template(self, messages: list[tuple[str, str]]) -> str:
        """Render (role, content) messages with the model's template (llama.cpp's built-in list).

        GGUFs without ``tokenizer.chat_template`` (the bundled Gemma 3 270M) fall back to the
        built-in template named after the architecture family, else ChatML.
        """
        tmpl = L.llama_model_chat_template(self.ptr, None)
        if not tmpl:
            arch = self.meta("general.architecture") or ""
            tmpl = b"gemma" if arch.startswith("gemma") else b"chatml"
        keep = [(r.encode(), c.encode()) for r, c in messages]
        arr = (L.llama_chat_message * len(keep))()
        for i, (r, c) in enumerate(keep):
            arr[i].role, arr[i].content = r, c
        cap = sum(len(c) + len(r) for r, c in keep) * 2 + 256
        buf = ctypes.create_string_buffer(cap)
        n = L.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, cap)
        if n > cap:
            buf = ctypes.create_string_buffer(n + 1)
            n = L.llama_chat_apply_template(tmpl, arr, len(keep), True, buf, n + 1)
        if n < 0:
            raise ModelError("the model has no chat template llama.cpp understands")
        return buf.raw[:n].decode("utf-8", errors="replace")

    def close(self) -> None:
        if self.ptr:
            L.llama_model_free(self.ptr)
            self.ptr = None


class Batch:
    """A llama_batch over numpy arrays, one sequence id per token."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.token = np.zeros(capacity, np.int32)
        self.pos = np.zeros(capacity, np.int32)
        self.n_seq_id = np.ones(capacity, np.int32)
        self.seq = np.zeros(capacity, np.int32)
        self.logits = np.zeros(capacity, np.int8)
        seq_p = ctypes.POINTER(L.llama_seq_id)
        base = self.seq.ctypes.data
        self._seq_ptrs = (seq_p * capacity)(*[ctypes.cast(base + 4 * i, seq_p) for i in range(capacity)])
        self.struct = L.llama_batch(
            n_tokens=0,
            token=self.token.ctypes.data_as(ctypes.POINTER(L.llama_token)),
            embd=None,
            pos=self.pos.ctypes.data_as(ctypes.POINTER(L.llama_pos)),
            n_seq_id=self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
            seq_id=self._seq_ptrs,
            logits=self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )
        self.n = 0

    def clear(self) -> None:
        self.n = 0
        self.struct.n_tokens = 0

    def add(self, tokens: list[int], start_pos: int, seq_id: int, *, logits: str = "last") -> int:
        """Append a run of one sequence; returns the batch index of its last token.

        ``logits``: "last" (sampling), "all" (scoring a completion) or "none" (prefill chunk).
        """
        k = len(tokens)
        a, b = self.n, self.n + k
        if b > self.capacity:
            raise ValueError("batch capacity exceeded")
        self.token[a:b] = tokens
        self.pos[a:b] = np.arange(start_pos, start_pos + k, dtype=np.int32)
        self.seq[a:b] = seq_id
        self.logits[a:b] = 1 if logits == "all" else 0
        if logits == "last":
            self.logits[b - 1] = 1
        self.n = b
        self.struct.n_tokens = b
        return b - 1


def decode_or_raise(ctx: NativeContext, batch: Batch, what: str) -> None:
    """A decode outside the serving loop, whose failure is an error: nothing there may treat a
    refused batch (llama.cpp's non-zero rc) as computed."""
    rc = ctx.decode(batch)
    if rc != 0:
        raise RuntimeError(f"llama_decode returned {rc} for a batch of {batch.n} tokens while {what}")


class NativeContext:
    """A llama context: KV cache (unified across sequence slots), logits, adapters."""

    def __init__(
        self,
        model: NativeModel,
        *,
        n_ctx: int,
        n_seq_max: int,
        n_batch: int,
        n_ubatch: int,
        n_threads: int,
        embeddings: bool = False,
        pooling: int | None = None,
        kv_unified: bool = True,
    ) -> None:
        p = L.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = n_batch
        p.n_ubatch = min(n_ubatch, n_batch)
        p.n_seq_max = n_seq_max
        p.n_threads = p.n_threads_batch = n_threads
        p.kv_unified = kv_unified
        p.no_perf = True
        p.embeddings = embeddings
        if pooling is not None:
            p.pooling_type = pooling
        ptr = L.llama_init_from_model(model.ptr, p)
        if not ptr:
            raise ModelError("llama.cpp could not create a context (out of memory?)")
        self.ptr = ptr
        self.model = model
        self.n_ctx = int(L.llama_n_ctx(ptr))
        self.mem = L.llama_get_memory(ptr)
        self._adapters: tuple = ()

    def decode(self, batch: Batch) -> int:
        return int(L.llama_decode(self.ptr, batch.struct))

    def set_threads(self, n: int) -> None:
        """Threads for the decodes that follow (prefill and generation alike)."""
        L.llama_set_n_threads(self.ptr, n, n)

    @property
    def threads(self) -> int:
        return int(L.llama_n_threads(self.ptr))

    def encode(self, batch: Batch) -> int:
        return int(L.llama_encode(self.ptr, batch.struct))

    def logits(self, i: int) -> np.ndarray:
        """Logits row of batch index ``i``: a view, valid until the next decode."""
        ptr = L.llama_get_logits_ith(self.ptr, i)
        if not ptr:
            raise RuntimeError(f"no logits for batch index {i}")
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,))

    def seq_embedding(self, seq_id: int, dim: int) -> np.ndarray:
        ptr = L.llama_get_embeddings_seq(self.ptr, seq_id)
        if not ptr:
            raise RuntimeError("no pooled embedding (is pooling enabled?)")
        return np.ctypeslib.as_array(ptr, shape=(dim,)).copy()

    def drop_seq(self, seq_id: int) -> None:
        L.llama_memory_seq_rm(self.mem, seq_id, -1, -1)

    def copy_seq(self, src: int, dst: int) -> None:
        """Make ``dst`` share every cell of ``src`` (the unified cache stores them once)."""
        L.llama_memory_seq_cp(self.mem, src, dst, -1, -1)

    def drop_tail(self, seq_id: int, p0: int) -> None:
        """Drop the cells of positions >= ``p0`` (rejected draft tokens)."""
        L.llama_memory_seq_rm(self.mem, seq_id, p0, -1)

    def seq_pos_max(self, seq_id: int) -> int:
        return int(L.llama_memory_seq_pos_max(self.mem, seq_id))

    def clear(self) -> None:
        L.llama_memory_clear(self.mem, True)

    def set_adapters(self, adapters: list[tuple[object, float]]) -> None:
        """Apply exactly these (adapter pointer, scale) pairs; [] = base model."""
        key = tuple((ctypes.cast(a, ctypes.c_void_p).value, s) for a, s in adapters)
        if key == self._adapters:
            return
        if adapters:
            arr = (L.llama_adapter_lora_p_ctypes * len(adapters))(*[a for a, _ in adapters])
            scales = (ctypes.c_float * len(adapters))(*[s for _, s in adapters])
            rc = L.llama_set_adapters_lora(self.ptr, arr, len(adapters), scales)
        else:
            rc = L.llama_set_adapters_lora(self.ptr, None, 0, None)
        if rc != 0:
            raise RuntimeError(f"llama_set_adapters_lora failed ({rc})")
        self._adapters = key

    def close(self) -> None:
        if self.ptr:
            L.llama_free(self.ptr)
            self.ptr = None
