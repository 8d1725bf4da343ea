"""Spec: every request field the installed ``openai`` SDK can send is declared by our request
models, so each is either honoured or refused by name; none is silently dropped."""

from __future__ import annotations

import pytest
from themis_shard.errors import BadRequest
from themis_shard.inference.openai_types import ChatBody, CompletionBody, EmbeddingsBody

openai = pytest.importorskip("openai")


def sdk_fields(typed_dict) -> set[str]:
    out: set[str] = set()
    for k in typed_dict.__mro__:
        out |= set(getattr(k, "__annotations__", {}))
    return out


def declared(model) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


@pytest.mark.parametrize(
    ("params", "model"),
    [
        ("openai.types.chat.completion_create_params.CompletionCreateParamsBase", ChatBody),
        ("openai.types.completion_create_params.CompletionCreateParamsBase", CompletionBody),
        ("openai.types.embedding_create_params.EmbeddingCreateParams", EmbeddingsBody),
    ],
)
def test_every_sdk_field_is_declared(params, model):
    import importlib

    module, name = params.rsplit(".", 1)
    assert sdk_fields(getattr(importlib.import_module(module), name)) <= declared(model)


@pytest.mark.parametrize(
    "field",
    [
        {"audio": {"voice": "x"}},
        {"prediction": {"type": "content", "content": "x"}},
        {"reasoning_effort": "low"},
        {"verbosity": "low"},
        {"web_search_options": {}},
        {"store": True},
        {"metadata": {"a": "b"}},
        {"service_tier": "flex"},
        {"prompt_cache_key": "k"},
        {"prompt_cache_retention": "24h"},
        {"moderation": {}},
        {"modalities": ["text", "audio"]},
    ],
)
def test_declared_fields_not_served_are_refused_by_name(field):
    body = ChatBody.model_validate({"messages": [{"role": "user", "content": "hi"}], **field})
    with pytest.raises(BadRequest) as exc:
        body.refusals()
    assert next(iter(field)) in exc.value.message and exc.value.code == "unsupported_parameter"
