"""Spec: an OpenAI stream resumed after the tokens already sent continues exactly as one run
(``/internal/openai/...`` with ``resume``): the same chunk ``id`` and ``created``, no second
``role`` delta, only the new text, usage counting the whole generation. Requests whose stream is
more than its tokens' text (``n`` > 1, logprobs, echo, tools, response_format) are not resumed."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.llm


def chunks(url: str, path: str, body: dict) -> tuple[list[int], list[dict]]:
    """(token ids of the ``event: token`` records, the JSON chunks) of an /internal stream."""
    ids, out, prev = [], [], ""
    with httpx.stream("POST", f"{url}{path}", json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if prev == "event: token":
                ids.append(int(line.removeprefix("data:")))
            elif line.startswith("data: {"):
                out.append(json.loads(line[5:]))
            prev = line
    return ids, out


def text(out: list[dict], chat: bool) -> str:
    key = (lambda c: c["delta"].get("content") or "") if chat else (lambda c: c["text"])
    return "".join(key(c) for o in out for c in o["choices"])


@pytest.fixture(scope="module")
def shard(make_server):
    return make_server()


@pytest.mark.parametrize("chat", [False, True])
def test_a_resumed_openai_stream_continues_as_one_run(shard, chat) -> None:
    path = "/internal/openai/chat/completions" if chat else "/internal/openai/completions"
    body = {
        "max_tokens": 30,
        "temperature": 0.8,
        "seed": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(
            {"messages": [{"role": "user", "content": "Tell me about the sea."}]}
            if chat
            else {"prompt": "The sea is"}
        ),
    }
    whole_ids, whole = chunks(shard.url, path, body)
    sent = 8
    resume = {"tokens": whole_ids[:sent], "id": whole[0]["id"], "created": whole[0]["created"]}
    rest_ids, rest = chunks(shard.url, path, {**body, "resume": resume})
    assert rest_ids == whole_ids[sent:]
    assert text(whole, chat).endswith(text(rest, chat)) and text(rest, chat)
    assert {(o["id"], o["created"]) for o in rest} == {(resume["id"], resume["created"])}
    assert not any(c["delta"].get("role") for o in rest for c in o["choices"]) if chat else True
    assert rest[-1]["usage"] == whole[-1]["usage"]


def test_what_cannot_be_resumed_is_refused_by_name(shard) -> None:
    resume = {"tokens": [1, 2], "id": "cmpl-x", "created": 1}
    r = httpx.post(
        f"{shard.url}/internal/openai/completions",
        json={"prompt": "The sea", "stream": True, "n": 2, "resume": resume},
        timeout=60,
    )
    assert r.status_code == 400 and "resume" in r.json()["error"]["message"]
    r = httpx.post(
        f"{shard.url}/v1/completions",
        json={"prompt": "The sea", "stream": True, "resume": resume},
        timeout=60,
    )
    assert r.status_code == 400 and "resume" in r.json()["error"]["message"]
