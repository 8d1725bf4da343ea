"""Spec: what schemathesis found on the inference routes, fixed: a prompt of token ids outside
the vocabulary is a 400 (llama.cpp aborted the whole process on it), and an operator can cap the
tokens one request generates (``THEMIS_LLM_MAX_TOKENS_LIMIT``, clamped as llama-server does)."""

from __future__ import annotations

import httpx
import pytest
from themis_shard.llm.runtime import LLMRuntime
from themis_shard.llm.settings import LLMSettings

from tests.llm.conftest import Server, llm_settings


def test_max_tokens_limit_clamps_what_a_request_asks_for() -> None:
    rt = LLMRuntime(LLMSettings(enabled=True, max_tokens_limit=4))
    assert rt.sampling(max_tokens=1000).max_tokens == 4
    assert rt.sampling(max_tokens=2).max_tokens == 2
    assert rt.sampling().max_tokens == 4  # the default (256) too
    assert LLMRuntime(LLMSettings(enabled=True)).sampling(max_tokens=1000).max_tokens == 1000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from themis_shard.app import create_app
    from themis_shard.settings import Settings

    settings = Settings(data_dir=tmp_path_factory.mktemp("shard"), llm=llm_settings(max_tokens_limit=3))
    with Server(create_app(settings)) as srv:
        yield srv


@pytest.mark.llm
@pytest.mark.parametrize("prompt", [[-1], [[5, 262144]], [2**40]])
def test_token_ids_outside_the_vocabulary_are_refused_and_the_shard_lives(server, prompt) -> None:
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_token", r.text
    ok = httpx.post(f"{server.url}/v1/completions", json={"prompt": [5, 6], "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200 and ok.json()["usage"]["prompt_tokens"] == 2


@pytest.mark.llm
def test_a_request_generates_at_most_the_limit(server) -> None:
    r = httpx.post(
        f"{server.url}/v1/infer", json={"prompt": "Once upon a time", "max_tokens": 50}, timeout=60
    )
    assert r.status_code == 200 and r.json()["tokens"] <= 3 and r.json()["finish_reason"] == "length"
