"""Real application clients against a real shard: LangChain's ChatOpenAI (invoke, stream,
with_structured_output, bind_tools) and OpenAIEmbeddings, and LlamaIndex's OpenAILike."""

from __future__ import annotations

import jsonschema
import pytest
from pydantic import BaseModel, Field

pytestmark = pytest.mark.llm

MODEL = "gemma3-270m"


class Person(BaseModel):
    """A person."""

    name: str = Field(max_length=20)
    age: int


class GetWeather(BaseModel):
    """Current weather in a city."""

    city: str = Field(max_length=16)


@pytest.fixture(scope="module")
def server(make_server):
    return make_server(n_ctx=2048, max_concurrent_requests=8, embedding_model="bundled")


@pytest.fixture(scope="module")
def chat_model(server):
    lc = pytest.importorskip("langchain_openai")
    return lc.ChatOpenAI(
        model=MODEL,
        base_url=f"{server.url}/v1",
        api_key="unused",
        temperature=0,
        max_tokens=48,
        max_retries=0,
    )


def test_langchain_invoke_and_stream(chat_model):
    msg = chat_model.invoke("Name a colour.")
    assert isinstance(msg.content, str) and msg.usage_metadata["output_tokens"] > 0
    streamed = "".join(chunk.content for chunk in chat_model.stream("Name a colour."))
    assert streamed == msg.content


def test_langchain_structured_output_is_valid(chat_model):
    person = chat_model.with_structured_output(Person).invoke("Describe a person called Ada.")
    assert isinstance(person, Person)
    jsonschema.validate(person.model_dump(), Person.model_json_schema())


def test_langchain_bind_tools_returns_a_valid_call(chat_model):
    llm = chat_model.bind_tools([GetWeather], tool_choice="any")
    msg = llm.invoke("What is the weather in Paris?")
    (call,) = msg.tool_calls
    assert call["name"] == "GetWeather"
    GetWeather.model_validate(call["args"])
    streamed = None
    for chunk in llm.stream("What is the weather in Paris?"):
        streamed = chunk if streamed is None else streamed + chunk
    assert streamed.tool_calls and streamed.tool_calls[0]["name"] == "GetWeather"


def test_langchain_embeddings(server):
    lc = pytest.importorskip("langchain_openai")
    emb = lc.OpenAIEmbeddings(
        model=server.llm.embedder.name,
        base_url=f"{server.url}/v1",
        api_key="unused",
        check_embedding_ctx_length=False,  # send text, not OpenAI tokenizer ids
    )
    docs = emb.embed_documents(["a cat", "a dog"])
    query = emb.embed_query("a cat")
    assert len(docs) == 2 and len(query) == server.llm.embedding_dimension
    assert sum(a * b for a, b in zip(docs[0], query, strict=True)) > 0.999


def test_llama_index_openai_like(server):
    mod = pytest.importorskip("llama_index.llms.openai_like")
    llm = mod.OpenAILike(
        model=MODEL,
        api_base=f"{server.url}/v1",
        api_key="unused",
        is_chat_model=True,
        max_tokens=16,
        temperature=0,
        timeout=120,
        max_retries=0,
    )
    from llama_index.core.llms import ChatMessage

    reply = llm.chat([ChatMessage(role="user", content="Name a colour.")])
    assert isinstance(reply.message.content, str)
    text = "".join(
        r.delta or "" for r in llm.stream_chat([ChatMessage(role="user", content="Name a colour.")])
    )
    assert text == reply.message.content
    completion = mod.OpenAILike(
        model=MODEL, api_base=f"{server.url}/v1", api_key="unused", max_tokens=8, temperature=0, max_retries=0
    ).complete("The capital of France is")
    assert isinstance(completion.text, str) and completion.text
