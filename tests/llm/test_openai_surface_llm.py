"""The OpenAI surface real clients rely on, through the official ``openai`` client against a real
shard (real model, real llama.cpp): structured outputs, tools, logprobs, n, penalties and bias,
embeddings, cached tokens, and every field honoured or refused by name."""

from __future__ import annotations

import base64
import json

import httpx
import jsonschema
import numpy as np
import pytest

from .lora_fixture import make_test_lora

pytestmark = pytest.mark.llm

openai = pytest.importorskip("openai")

MODEL = "gemma3-270m"
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 16}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 12}},
            "required": ["zone"],
        },
    },
}


@pytest.fixture(scope="module")
def server(make_server, tmp_path_factory):
    srv = make_server(n_ctx=2048, max_concurrent_requests=8, embedding_model="bundled")
    return srv


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


def chat(client, content: str, **kw):
    return client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": content}],
        max_tokens=kw.pop("max_tokens", 80),
        **kw,
    )


# -- refusal by name ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "frobnicate": 1},
            "frobnicate",
        ),
        ("/v1/completions", {"prompt": "hi", "suffix": "end"}, "suffix"),
        ("/v1/completions", {"prompt": "hi", "best_of": 3}, "best_of"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "audio": {}}, "audio"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "store": True}, "store"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "functions": []},
            "functions",
        ),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi", "bogus": 1}]}, "bogus"),
        ("/v1/embeddings", {"input": "hi", "dimensions": 7}, "dimensions"),
        ("/v1/embeddings", {"input": [[1, 2, 3]]}, "input"),
        (
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "hi"}],
                "response_format": {"type": "json_object"},
                "stop": "x",
            },
            "stop",
        ),
    ],
)
def test_fields_not_served_are_refused_by_name(http, path, body, named):
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] in ("unsupported_parameter", "invalid_request") and named in err["message"]


def test_bad_values_are_a_4xx_never_a_500(http):
    for body in (
        {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"999999999": 5}},
        {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"7": 500}},
        {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3},
        {"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"},
        {"messages": [{"role": "user", "content": "hi"}], "n": 0},
        {"messages": [{"role": "tool", "content": "42"}]},
        {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema"}},
    ):
        r = http.post("/v1/chat/completions", json=body)
        assert r.status_code == 400, (body, r.text)
        assert set(r.json()["error"]) == {"code", "message"}


# -- structured outputs -------------------------------------------------------------------------


def test_json_schema_output_parses_and_validates(client):
    r = chat(
        client,
        "Describe a person as JSON.",
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
        temperature=0,
        max_tokens=120,
    )
    c = r.choices[0]
    assert c.finish_reason == "stop"
    jsonschema.validate(json.loads(c.message.content), PERSON)


def test_json_object_output_is_an_object(client):
    r = chat(
        client, "Give me a JSON object.", response_format={"type": "json_object"}, temperature=0.7, seed=3
    )
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:  # cut by max_tokens: the grammar kept it a prefix of an object
        assert r.choices[0].finish_reason == "length" and r.choices[0].message.content.lstrip().startswith(
            "{"
        )


def test_structured_output_streams_the_same_text(client):
    kw = {
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}},
        "temperature": 0,
        "max_tokens": 120,
    }
    plain = chat(client, "A person:", **kw).choices[0].message.content
    chunks = list(chat(client, "A person:", stream=True, **kw))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == plain


# -- tools --------------------------------------------------------------------------------------


def test_required_tool_call_matches_the_tools_schema(client):
    r = chat(
        client, "What is the weather in Paris?", tools=[WEATHER, TIME], tool_choice="required", temperature=0
    )
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    (call,) = c.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    spec = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), spec["function"]["parameters"])


def test_named_tool_choice_calls_that_tool(client):
    r = chat(
        client,
        "Hello",
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        temperature=0.8,
        seed=1,
    )
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    jsonschema.validate(json.loads(call.function.arguments), TIME["function"]["parameters"])


@pytest.mark.parametrize("choice", ["auto", None])  # None: the field left out, which means "auto"
def test_auto_tool_choice_answers_with_a_valid_call_or_text(client, choice):
    extra = {} if choice is None else {"tool_choice": choice}
    for prompt in ("What is the weather in Paris?", "Say hello."):
        r = chat(client, prompt, tools=[WEATHER, TIME], temperature=0, max_tokens=48, **extra)
        c = r.choices[0]
        if c.message.tool_calls:
            assert c.finish_reason == "tool_calls"
            (call,) = c.message.tool_calls
            spec = {"get_weather": WEATHER, "get_time": TIME}[call.function.name]
            jsonschema.validate(json.loads(call.function.arguments), spec["function"]["parameters"])
        else:
            assert c.finish_reason in ("stop", "length") and isinstance(c.message.content, str)
            assert not c.message.content.lstrip().startswith("{")


def test_auto_tool_choice_streams(client):
    chunks = list(
        chat(client, "Weather in Oslo?", tools=[WEATHER], tool_choice="auto", temperature=0, stream=True)
    )
    assert chunks and chunks[-1].choices[0].finish_reason in ("tool_calls", "stop", "length")


def test_tool_choice_none_answers_in_text(client):
    r = chat(client, "Hello", tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=8)
    assert r.choices[0].message.tool_calls is None and isinstance(r.choices[0].message.content, str)


def test_streamed_tool_call_arrives_as_a_tool_calls_delta(client):
    chunks = list(
        chat(client, "Weather in Oslo?", tools=[WEATHER], tool_choice="required", temperature=0, stream=True)
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_weather" and calls[0].index == 0
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER["function"]["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_results_in_the_history_are_rendered(client):
    r = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "user", "content": "Weather in Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Rome", "unit": "C"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "21 C and sunny"},
        ],
        tools=[WEATHER],
        tool_choice="none",
        max_tokens=8,
        temperature=0,
    )
    assert r.choices[0].finish_reason in ("stop", "length") and r.usage.prompt_tokens > 40


# -- logprobs, n, penalties, bias -----------------------------------------------------------------


def test_chat_logprobs_report_the_chosen_token_and_alternatives(client):
    r = chat(client, "Count: one, two,", logprobs=True, top_logprobs=3, temperature=0, max_tokens=4)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 3
        assert t.top_logprobs[0].logprob >= t.top_logprobs[-1].logprob
        assert t.logprob == pytest.approx(t.top_logprobs[0].logprob)  # greedy: the best token
    assert "".join(t.token for t in content) == r.choices[0].message.content


def test_completion_logprobs_legacy_shape(client):
    r = client.completions.create(model=MODEL, prompt="One, two,", max_tokens=3, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 3
    assert all(len(t) <= 2 for t in lp.top_logprobs) and lp.text_offset[0] == 0


def test_echo_with_logprobs_scores_the_prompt_tokens_too(client):
    r = client.completions.create(
        model=MODEL, prompt="One, two, three,", max_tokens=2, temperature=0, echo=True, logprobs=1
    )
    lp = r.choices[0].logprobs
    text = r.choices[0].text
    assert text.startswith("One, two, three,") and "".join(lp.tokens) == text
    assert all(v <= 0 for v in lp.token_logprobs)  # (BOS has no text and is not listed)
    assert lp.text_offset == sorted(lp.text_offset) and len(lp.tokens) == r.usage.prompt_tokens - 1 + 2


def test_echo_returns_the_prompt_first(client):
    r = client.completions.create(model=MODEL, prompt="One, two,", max_tokens=3, temperature=0, echo=True)
    assert r.choices[0].text.startswith("One, two,") and len(r.choices[0].text) > len("One, two,")


def test_n_choices_from_one_prompt(client):
    r = chat(client, "Name a fruit.", n=3, temperature=1.0, seed=5, max_tokens=6)
    assert [c.index for c in r.choices] == [0, 1, 2]
    again = chat(client, "Name a fruit.", n=3, temperature=1.0, seed=5, max_tokens=6)
    assert [c.message.content for c in r.choices] == [c.message.content for c in again.choices]
    greedy = chat(client, "Name a fruit.", n=2, temperature=0, max_tokens=6)
    assert greedy.choices[0].message.content == greedy.choices[1].message.content


def prompt_tokens_prefilled(http) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f'themis_llm_prompt_tokens_total{{model="{MODEL}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_n_sequences_share_one_prefill(client, http):
    before = prompt_tokens_prefilled(http)
    r = client.completions.create(
        model=MODEL,
        prompt="Once upon a time, in a land far away, there lived",
        n=4,
        max_tokens=5,
        temperature=1.0,
        seed=2,
    )
    prefilled = prompt_tokens_prefilled(http) - before
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert prefilled <= r.usage.prompt_tokens  # once, not 4 times
    assert len({c.text for c in r.choices}) > 1  # independent samplers


def test_logit_bias_bans_and_forces_tokens(client, server):
    native = server.llm.models[MODEL].native
    base = client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=1, temperature=0
    )
    first = native.tokenize(base.choices[0].text, add_special=False)[0]
    banned = client.completions.create(
        model=MODEL,
        prompt="The capital of France is",
        max_tokens=1,
        temperature=0,
        logit_bias={str(first): -100},
    )
    assert banned.choices[0].text != base.choices[0].text
    forced_id = native.tokenize(" banana", add_special=False)[0]
    forced = client.completions.create(
        model=MODEL,
        prompt="The capital of France is",
        max_tokens=1,
        temperature=0,
        logit_bias={str(forced_id): 100},
    )
    assert forced.choices[0].text == native.detokenize([forced_id])


def test_frequency_penalty_breaks_repetition(client):
    prompt = "yes yes yes yes yes yes yes yes"
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0)
    penal = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=12, temperature=0, frequency_penalty=2.0, presence_penalty=2.0
    )
    assert plain.choices[0].text.count("yes") > penal.choices[0].text.count("yes")


# -- usage: cached prompt tokens ------------------------------------------------------------------


def test_usage_reports_prompt_tokens_from_the_prefix_cache(client):
    long = "Background. " + " ".join(f"fact {i} is that the sky is blue." for i in range(60))
    first = client.completions.create(model=MODEL, prompt=long, max_tokens=2, temperature=0)
    second = client.completions.create(model=MODEL, prompt=long + " More.", max_tokens=2, temperature=0)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens >= 64


# -- embeddings --------------------------------------------------------------------------------


def test_embeddings_float_and_base64_agree(client, server):
    name = server.llm.embedder.name
    texts = ["a cat sat on the mat", "quarterly revenue grew"]
    f = client.embeddings.create(model=name, input=texts)
    assert [d.index for d in f.data] == [0, 1] and f.usage.prompt_tokens > 0
    raw = httpx.post(
        f"{client.base_url}embeddings", json={"input": texts, "encoding_format": "base64"}, timeout=60
    ).json()
    for d, b in zip(f.data, raw["data"], strict=True):
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
        assert np.allclose(decoded, d.embedding, atol=1e-6)
    one = client.embeddings.create(model=name, input="a cat sat on the mat")
    assert np.allclose(one.data[0].embedding, f.data[0].embedding, atol=1e-5)


# -- models: base model and adapters --------------------------------------------------------------


def test_adapters_are_models_and_model_picks_one(client, http, server, tmp_path):
    path = make_test_lora(tmp_path / "legal.gguf", server.llm.models[MODEL].native.meta, rank=4, seed=1)
    r = http.post("/v1/adapters", json={"name": "legal-lora", "domain": "legal", "path": str(path)})
    assert r.status_code in (200, 201), r.text
    try:
        ids = {m.id: m for m in client.models.list()}
        assert MODEL in ids and "legal-lora" in ids
        kw = {"messages": [{"role": "user", "content": "Say something."}], "temperature": 0, "max_tokens": 6}
        kw |= {"logprobs": True}
        base = client.chat.completions.create(model=MODEL, **kw)
        by_name = client.chat.completions.create(model="legal-lora", **kw)
        by_domain = client.chat.completions.create(model="legal", **kw)
        assert by_name.model == "legal-lora" and by_domain.model == "legal"
        assert by_name.choices[0].message.content == by_domain.choices[0].message.content

        def first_logprob(r):
            return r.choices[0].logprobs.content[0].logprob

        assert first_logprob(by_name) == pytest.approx(first_logprob(by_domain))
        assert first_logprob(by_name) != pytest.approx(first_logprob(base), abs=1e-4)  # the adapter ran
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(
                model="no-such-thing", messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
    finally:
        http.delete("/v1/adapters/legal-lora")
