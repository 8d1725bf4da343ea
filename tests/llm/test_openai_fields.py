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


# ---- what the OpenAPI document promises is what the server accepts ------------------------------
def _walk(node):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


@pytest.mark.parametrize("model", [ChatBody, CompletionBody, EmbeddingsBody])
def test_bounds_are_written_in_json_schemas_words(model):
    schema = model.model_json_schema()
    typed = [n for n in _walk(schema) if "type" in n]
    assert not [n for n in typed if {"ge", "le", "gt", "lt"} & n.keys()]
    assert any(n.get("minimum") == 1 for n in typed)


def test_fields_refused_by_name_admit_only_what_is_served():
    props = ChatBody.model_json_schema()["properties"]
    assert props["functions"]["type"] == "null" and "Refused by name" in props["functions"]["description"]
    assert props["store"]["enum"] == [False, None]
    assert props["service_tier"]["enum"] == ["auto", "default", None]
    with pytest.raises(BadRequest, match="functions is not supported"):
        ChatBody.model_validate({"messages": [{"role": "user", "content": "x"}], "functions": []}).refusals()


def test_a_tool_message_without_its_call_id_is_outside_the_schema_as_on_the_server():
    jsonschema = pytest.importorskip("jsonschema")
    schema = ChatBody.model_json_schema()
    ok = {"messages": [{"role": "tool", "content": "42", "tool_call_id": "c1"}]}
    bad = {"messages": [{"role": "tool", "content": "42"}]}
    jsonschema.validate(ok, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    with pytest.raises(BadRequest, match="tool_call_id"):
        ChatBody.model_validate(bad).messages[0].as_template()


def test_best_of_other_than_n_is_outside_the_schema_as_on_the_server():
    jsonschema = pytest.importorskip("jsonschema")
    schema = CompletionBody.model_json_schema()
    jsonschema.validate({"prompt": "x", "best_of": 2, "n": 2}, schema)
    jsonschema.validate({"prompt": "x", "best_of": 1}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"prompt": "x", "best_of": 3, "n": 2}, schema)
    with pytest.raises(BadRequest, match="best_of"):
        CompletionBody.model_validate({"prompt": "x", "best_of": 3, "n": 2}).refusals()
