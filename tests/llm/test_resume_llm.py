"""Spec: a generation resumed after the tokens already sent continues exactly as one run.

A shard that takes over a stream (``/internal/infer`` with ``resume.tokens``) prefills the prompt,
then decodes the sent tokens one step at a time and draws for each as the first shard did
(``SamplingParams.replay``), so its first new token is the one the dead shard would have sampled
next: greedy, and sampled with a seed alike. (Prefilling prompt + sent tokens in one batch is not
enough: llama.cpp's batched kernels round differently from single-token decode, and the
continuation drifts within a few tokens.) The stream sends only the new tokens."""

from __future__ import annotations

import json

import httpx
import pytest

pytestmark = pytest.mark.llm

PROMPT = "My favourite memory of the summer is"


def generate(url: str, body: dict) -> tuple[list[int], str, dict]:
    """(token ids from the ``event: token`` records, text, the done frame) of an /internal stream."""
    ids, text, done, prev = [], "", {}, ""
    with httpx.stream("POST", f"{url}/internal/infer", json=body, timeout=300) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if prev == "event: token":
                ids.append(int(line.removeprefix("data:")))
            elif line.startswith("data: {"):
                frame = json.loads(line[5:])
                text += frame.get("token") or ""
                done = frame if frame.get("done") else done
            prev = line
    return ids, text, done


@pytest.fixture(scope="module")
def shard(make_server):
    return make_server()


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "seed": 42}])
@pytest.mark.parametrize("sent", [1, 5, 20, 40])  # 40: all of max_tokens were sent
def test_a_resumed_generation_continues_as_one_run(shard, sampling, sent) -> None:
    body = {"prompt": PROMPT, "max_tokens": 40, "stream": True, **sampling}
    whole, whole_text, whole_done = generate(shard.url, body)
    assert len(whole) == 40

    rest, rest_text, done = generate(shard.url, {**body, "resume": {"tokens": whole[:sent]}})
    assert rest == whole[sent:]  # nothing re-sent, nothing different
    assert whole_text.endswith(rest_text) and len(rest_text) < len(whole_text)
    # the result is the whole generation's: max_tokens and usage count the tokens sent before
    assert done["finish_reason"] == "length" and done["tokens"] == 40
    assert done["usage"] == whole_done["usage"]


def test_resume_is_the_routers_field_only(shard) -> None:
    r = httpx.post(
        f"{shard.url}/v1/infer",
        json={"prompt": PROMPT, "stream": True, "resume": {"tokens": [1, 2]}},
        timeout=60,
    )
    assert r.status_code == 400 and "resume" in r.json()["error"]["message"]
    r = httpx.post(
        f"{shard.url}/internal/infer", json={"prompt": PROMPT, "resume": {"tokens": [1]}}, timeout=60
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
    r = httpx.post(
        f"{shard.url}/internal/infer",
        json={"prompt": PROMPT, "stream": True, "resume": {"tokens": [10**9]}},
        timeout=60,
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_token"
