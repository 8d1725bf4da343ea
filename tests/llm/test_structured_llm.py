"""Property: whatever the model prefers, constrained decoding yields JSON that parses and
validates against the schema (llama.cpp's grammar over the real Gemma vocabulary, random logits
so every step is a worst case that the grammar must repair)."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.llm

scalar = st.sampled_from(
    [
        {"type": "integer"},
        {"type": "boolean"},
        {"type": "string", "maxLength": 8},
        {"enum": ["red", "green", "blue"]},
        {"type": "number"},
        {"type": "null"},
    ]
)
field = st.one_of(scalar, st.builds(lambda s: {"type": "array", "items": s, "maxItems": 3}, scalar))
schemas = st.dictionaries(
    st.from_regex(r"[a-z]{1,6}", fullmatch=True), field, min_size=1, max_size=4
).flatmap(
    lambda props: st.builds(
        lambda req: {"type": "object", "properties": props, "required": req, "additionalProperties": False},
        st.lists(st.sampled_from(sorted(props)), unique=True),
    )
)


@pytest.fixture(scope="module")
def decode(native_model):
    from themis_shard.llm.grammar import GrammarConstraint, schema_grammar
    from themis_shard.llm.sampling import Sampler, SamplingParams

    def run(schema: dict, seed: int, temperature: float, limit: int = 400) -> str:
        c = GrammarConstraint(native_model.vocab, native_model.n_vocab, schema_grammar(schema))
        s = Sampler(SamplingParams(temperature=temperature, seed=seed, top_k=64), constraint=c)
        rng = np.random.default_rng(seed)
        out: list[int] = []
        for _ in range(limit):
            tok = s.sample(rng.normal(size=native_model.n_vocab).astype(np.float32) * 4)
            if native_model.is_eog(tok):
                return native_model.detokenize(out)
            out.append(tok)
        raise AssertionError(f"no end within {limit} tokens: {native_model.detokenize(out)!r}")

    return run


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=schemas, seed=st.integers(0, 2**16), temperature=st.sampled_from([0.0, 0.7, 1.5]))
def test_constrained_output_always_validates(decode, schema, seed, temperature):
    text = decode(schema, seed, temperature)
    jsonschema.validate(json.loads(text), schema)
