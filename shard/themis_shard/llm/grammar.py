"""Constrained decoding: a GBNF grammar per sequence, on llama.cpp's grammar sampler.

``GrammarConstraint`` is the ``sampling.Constraint`` the sampler checks each token against.
llama.cpp does the grammar work (stacks, UTF-8 partial pieces, end-of-generation only when the
grammar is complete); this module only moves a logits row in and out of a
``llama_token_data_array``. JSON Schema becomes GBNF with llama-cpp-python's converter
(``json_schema_to_gbnf``), the one llama.cpp's own server uses.
"""

from __future__ import annotations

import ctypes
import json
from typing import Any

import llama_cpp as L
import numpy as np
from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)


class GrammarError(ValueError):
    """A grammar or schema llama.cpp cannot use (rendered as 400)."""


def json_object_grammar() -> str:
    """Any JSON object (``response_format: json_object``)."""
    return JSON_GBNF


def schema_grammar(schema: dict[str, Any]) -> str:
    """GBNF accepting exactly the JSON documents that match ``schema`` (the converter's subset)."""
    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:  # the converter raises bare Exceptions/KeyErrors on what it lacks
        raise GrammarError(f"unsupported JSON schema: {exc}") from None


def join_rules(*grammars: str) -> str:
    """One GBNF text from rule sets: each rule set ends on its own line, whatever its source left.

    The converter's output may or may not end with a newline; plain concatenation would put the
    next set's first rule on the previous set's last line, which llama.cpp refuses to parse.
    """
    return "".join(g.rstrip("\n") + "\n" for g in grammars)


class GrammarConstraint:
    """One sequence's grammar state. Engine thread only after construction."""

    def __init__(self, vocab: Any, n_vocab: int, gbnf: str) -> None:
        self._ptr = L.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        if not self._ptr:
            raise GrammarError("the grammar does not parse (GBNF)")
        self._n_vocab = n_vocab
        self._one = np.zeros(1, _TOKEN_DATA)
        self._all: np.ndarray | None = None  # allocated on the first full mask

    @staticmethod
    def _array(buf: np.ndarray) -> L.llama_token_data_array:
        return L.llama_token_data_array(
            data=buf.ctypes.data_as(ctypes.POINTER(L.llama_token_data)),
            size=len(buf),
            selected=-1,
            sorted=False,
        )

    def allows(self, token: int) -> bool:
        one = self._one
        one["id"][0], one["logit"][0] = token, 0.0
        arr = self._array(one)
        L.llama_sampler_apply(self._ptr, ctypes.byref(arr))
        return bool(np.isfinite(one["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        if self._all is None:
            self._all = np.zeros(self._n_vocab, _TOKEN_DATA)
        buf = self._all
        buf["id"] = np.arange(self._n_vocab, dtype=np.int32)
        buf["logit"] = logits
        arr = self._array(buf)
        L.llama_sampler_apply(self._ptr, ctypes.byref(arr))
        return buf["logit"].copy()

    def accept(self, token: int) -> None:
        L.llama_sampler_accept(self._ptr, token)

    def close(self) -> None:
        if self._ptr:
            L.llama_sampler_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:
        self.close()
