"""Spec: what schemathesis found on the inference routes, fixed: a prompt of token ids outside
the vocabulary is a 400 (llama.cpp aborted the whole process on it), and one request may ask
for at most ``THEMIS_LLM_MAX_TOKENS_LIMIT`` tokens (default 4,096): more is a 400
``max_tokens_too_large`` that names the limit, on every generation route, never a generation
that runs to the end of the context."""

from __future__ import annotations

import httpx
import pytest
from themis_shard.errors import BadRequest
from themis_shard.llm.runtime import LLMRuntime
from themis_shard.llm.settings import LLMSettings
from themis_testing.app_server import Server, free_port

from tests.llm.conftest import llm_settings


def test_max_tokens_above_the_limit_is_refused_by_name() -> None:
    rt = LLMRuntime(LLMSettings(enabled=True, max_tokens_limit=4))
    with pytest.raises(BadRequest) as refused:
        rt.sampling(max_tokens=1000)
    assert refused.value.code == "max_tokens_too_large" and "at most 4" in refused.value.message
    assert rt.sampling(max_tokens=4).max_tokens == 4
    assert rt.sampling().max_tokens == 4  # the default (256) is lowered to the limit
    assert LLMSettings().max_tokens_limit == 4096
    with pytest.raises(BadRequest):
        LLMRuntime(LLMSettings(enabled=True)).sampling(max_tokens=1_000_000_000)
    assert (
        LLMRuntime(LLMSettings(enabled=True, max_tokens_limit=0)).sampling(max_tokens=10**6).max_tokens
        == 10**6
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from themis_shard.app import create_app
    from themis_shard.settings import Settings

    port = free_port()
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("shard"), port=port, llm=llm_settings(max_tokens_limit=3)
    )
    with Server(create_app(settings), port) as srv:
        yield srv


@pytest.mark.llm
@pytest.mark.parametrize("prompt", [[-1], [[5, 262144]], [2**40]])
def test_token_ids_outside_the_vocabulary_are_refused_and_the_shard_lives(server, prompt) -> None:
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_token", r.text
    ok = httpx.post(f"{server.url}/v1/completions", json={"prompt": [5, 6], "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200 and ok.json()["usage"]["prompt_tokens"] == 2


ROUTES = [
    ("/v1/infer", {"prompt": "Once upon a time"}),
    ("/v1/completions", {"prompt": "Once upon a time"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/rag", {"query": "Why is the sky blue?", "collection": "nowhere"}),
    ("/v1/aql", None),
]


@pytest.mark.llm
@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[p for p, _ in ROUTES])
def test_max_tokens_above_the_limit_is_a_400_on_every_generation_route(server, path, body) -> None:
    if body is None:  # AQL INFER goes through /v1/infer and relays its answer
        body = {"query": "INFER 'gemma3-270m' 'Once upon a time' OPTIONS {max_tokens: 50}"}
    else:
        body = {**body, "max_tokens": 1_000_000_000 if path != "/v1/aql" else 50}
    r = httpx.post(f"{server.url}{path}", json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "max_tokens_too_large" and "at most 3" in r.json()["error"]["message"]


@pytest.mark.llm
def test_max_completion_tokens_and_batch_items_are_bounded_too(server) -> None:
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4},
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "max_tokens_too_large"
    r = httpx.post(
        f"{server.url}/v1/infer:batch",
        json={"requests": [{"prompt": "a", "max_tokens": 2}, {"prompt": "b", "max_tokens": 400}]},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    first, second = r.json()["results"]
    assert first["tokens"] <= 2 and second["error"]["code"] == "max_tokens_too_large"


@pytest.mark.llm
def test_within_the_limit_a_request_generates_as_asked(server) -> None:
    r = httpx.post(f"{server.url}/v1/infer", json={"prompt": "Once upon a time", "max_tokens": 3}, timeout=60)
    assert r.status_code == 200 and r.json()["tokens"] <= 3
    r = httpx.post(f"{server.url}/v1/infer", json={"prompt": "Once upon a time"}, timeout=60)
    assert r.status_code == 200 and r.json()["tokens"] <= 3  # the default, lowered to the limit


def test_the_openapi_schema_states_the_limit(server) -> None:
    schema = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    body = schema["paths"]["/v1/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    name = body["$ref"].rsplit("/", 1)[1]
    prop = schema["components"]["schemas"][name]["properties"]["max_tokens"]
    assert 3 in [branch.get("maximum") for branch in [prop, *prop.get("anyOf", [])]]


@pytest.mark.llm
@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/v1/infer", '{"prompt": "a \\ud800 b", "max_tokens": 2}'),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}'),
    ],
)
def test_a_prompt_with_a_lone_surrogate_is_a_400_that_says_so(server, path, raw) -> None:
    headers = {"content-type": "application/json"}
    r = httpx.post(f"{server.url}{path}", content=raw, headers=headers, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_unicode" and "lone UTF-16 surrogate" in r.text


@pytest.mark.llm
def test_max_tokens_over_the_limit_is_refused_even_next_to_a_max_completion_tokens_within_it(server) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2, "max_tokens": 5}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "max_tokens_too_large", r.text


@pytest.mark.llm
def test_legacy_completions_default_to_16_tokens_lowered_to_the_limit_not_refused(server) -> None:
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Once upon a time"}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 3
