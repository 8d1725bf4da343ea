"""Spec: real OpenAI clients (openai, LangChain, LlamaIndex) against a real 3-shard cluster with
the real model and API keys on (a client key for inference, the admin key to load the adapter; a
wrong key is a 401 the clients surface). ``model`` names an adapter or its domain and the
request runs on the shard that serves it, from any entry shard (``system_fingerprint`` names the
shard that ran it); ``/v1/models`` lists the adapter everywhere; structured outputs and tool calls
validate."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from themis_client import Forbidden, ThemisClient
from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_shard.llm.embeddings import BUNDLED_NAME
from themis_shard.llm.model import resolve_model_path
from themis_shard.llm.native import NativeModel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.llm.lora_fixture
from tests.llm.lora_fixture import make_test_lora

pytestmark = [pytest.mark.e2e, pytest.mark.llm, pytest.mark.slow]

openai = pytest.importorskip("openai")

ROUTER = {"thresholds": (-1.0, -1.0, -1.0)}  # every announced adapter qualifies
ADMIN_KEY, CLIENT_KEY = new_key(), new_key()
AUTH_ENV = {
    "THEMIS_AUTH_ENABLED": "true",
    "THEMIS_AUTH_KEYS": ";".join(
        (entry_for(ADMIN_KEY, Role.admin).line(), entry_for(CLIENT_KEY, Role.client).line())
    ),
}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 16}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def lora_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("lora") / "legal.gguf"
    model = NativeModel(resolve_model_path("bundled"))
    try:
        make_test_lora(path, model.meta, rank=2, layers=range(0, 2))
    finally:
        model.close()
    return path


def client(url: str, key: str = CLIENT_KEY):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def test_openai_clients_through_a_three_shard_cluster(local_cluster, lora_file) -> None:
    cluster = local_cluster(3, llm=True, router=ROUTER, env=AUTH_ENV)
    s0, s1, s2 = (cluster.url(s) for s in cluster.ids)
    with pytest.raises(openai.AuthenticationError):
        client(s0, key="themis_wrong").models.list()
    # Loading an adapter is Themis's own API (admin only); the OpenAI routes are the clients' below.
    load = {"domain": "legal", "path": str(lora_file), "evaluate": True}
    with ThemisClient(s1, api_key=CLIENT_KEY) as as_client, pytest.raises(Forbidden):
        as_client.load_adapter("legal-qa", **load)
    with ThemisClient(s1, api_key=ADMIN_KEY, timeout=120) as as_admin:
        assert as_admin.load_adapter("legal-qa", **load).name == "legal-qa"
    deadline = time.monotonic() + 300  # the adapter is evaluated before it is announced
    while time.monotonic() < deadline:
        if "legal-qa" in {m.id for m in client(s0).models.list()}:
            break
        time.sleep(0.5)
    else:
        pytest.fail("shard-0 never listed the adapter announced by shard-1")

    # model = adapter or domain: runs on shard-1 from every entry shard, plain and streamed.
    for entry in (s0, s2):
        for name in ("legal-qa", "legal"):
            r = client(entry).chat.completions.create(
                model=name,
                messages=[{"role": "user", "content": "The contract"}],
                max_tokens=4,
                temperature=0,
            )
            assert r.system_fingerprint == "themis:shard-1" and r.model == name
    chunks = list(
        client(s0).chat.completions.create(
            model="legal-qa",
            messages=[{"role": "user", "content": "The court"}],
            max_tokens=4,
            temperature=0,
            stream=True,
        )
    )
    assert {c.system_fingerprint for c in chunks} == {"themis:shard-1"}
    # domain in the body (extra_body) routes the same way
    r = client(s2).completions.create(
        model="gemma3-270m", prompt="The statute", max_tokens=3, temperature=0, extra_body={"domain": "legal"}
    )
    assert r.system_fingerprint == "themis:shard-1"

    # Structured output and tools, routed, always valid.
    r = client(s2).chat.completions.create(
        model="legal",
        messages=[{"role": "user", "content": "A person as JSON"}],
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
        max_tokens=64,
        temperature=0,
    )
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
    r = client(s0).chat.completions.create(
        model="legal-qa",
        messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=48,
        temperature=0,
    )
    (call,) = r.choices[0].message.tool_calls
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])

    # LangChain: invoke, stream, structured output, tools, embeddings; LlamaIndex: OpenAILike.
    lc = pytest.importorskip("langchain_openai")
    from pydantic import BaseModel, Field

    class Person(BaseModel):
        name: str = Field(max_length=16)
        age: int

    chat = lc.ChatOpenAI(
        model="legal-qa", base_url=f"{s2}/v1", api_key=CLIENT_KEY, temperature=0, max_tokens=128
    )
    msg = chat.invoke("Say hello.")
    assert msg.response_metadata["system_fingerprint"] == "themis:shard-1"
    assert "".join(c.content for c in chat.stream("Say hello.")) == msg.content
    assert isinstance(chat.with_structured_output(Person).invoke("A person."), Person)
    tool_msg = chat.bind_tools([WEATHER], tool_choice="any").invoke("Weather in Rome?")
    assert tool_msg.tool_calls[0]["name"] == "get_weather"
    emb = lc.OpenAIEmbeddings(
        model=BUNDLED_NAME, base_url=f"{s0}/v1", api_key=CLIENT_KEY, check_embedding_ctx_length=False
    )
    vectors = emb.embed_documents(["a contract", "a court"])
    assert len(vectors) == 2 and len(vectors[0]) > 0

    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model="legal", api_base=f"{s0}/v1", api_key=CLIENT_KEY, max_tokens=6, temperature=0)
    assert isinstance(llm.complete("The contract").text, str)

    # A dead shard: a request for its domain fails over to another shard (the base model serves
    # it there, as /v1/infer does for a domain nobody serves).
    cluster.kill("shard-1")
    r = client(s0).completions.create(
        model="gemma3-270m",
        prompt="The contract",
        max_tokens=3,
        temperature=0,
        extra_body={"domain": "legal"},
    )
    assert r.system_fingerprint in ("themis:shard-0", "themis:shard-2")
