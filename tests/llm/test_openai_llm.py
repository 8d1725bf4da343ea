"""OpenAI compatibility, checked with the official ``openai`` client against a real server."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.llm

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client(make_server):
    server = make_server(n_ctx=1024, max_concurrent_requests=4)
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def test_models_list(client):
    assert [m.id for m in client.models.list()] == ["gemma3-270m"]


def test_completion(client):
    r = client.completions.create(
        model="gemma3-270m", prompt="The capital of France is", max_tokens=6, temperature=0
    )
    assert r.object == "text_completion" and len(r.choices) == 1
    assert r.choices[0].finish_reason in ("length", "stop") and r.choices[0].text
    assert (
        r.usage.completion_tokens <= 6
        and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    )


def test_streamed_completion_equals_the_plain_one(client):
    kwargs = {"model": "gemma3-270m", "prompt": "One, two, three,", "max_tokens": 8, "temperature": 0}
    plain = client.completions.create(**kwargs).choices[0].text
    chunks = list(client.completions.create(stream=True, **kwargs))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == plain
    assert chunks[-1].choices[0].finish_reason == "length"


def test_chat_completion_and_stream(client):
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Name a colour."},
    ]
    r = client.chat.completions.create(model="gemma3-270m", messages=messages, max_tokens=8, temperature=0)
    msg = r.choices[0].message
    assert r.object == "chat.completion" and msg.role == "assistant" and isinstance(msg.content, str)
    stream = client.chat.completions.create(
        model="gemma3-270m",
        messages=messages,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == msg.content
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == r.usage.completion_tokens


def test_errors_surface_as_openai_exceptions(client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="hi", max_tokens=2)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="gemma3-270m", prompt="hi", max_tokens=2, temperature=-3)
