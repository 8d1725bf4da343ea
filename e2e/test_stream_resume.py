"""Spec: a routed generation survives the death of the shard generating it (issue 32, item 1).

A real 3-shard cluster with the real model. A request with a ``domain`` nobody serves is routed
to the ring owner of its prompt, which the ``X-Themis-Shard`` header names. When that shard is
killed (SIGKILL) mid-generation:

* a routed ``/v1/infer`` stream continues on another shard: the client's text equals an
  uninterrupted run's, token for token (greedy, and sampled with a seed), and the final frame
  names the shard it moved to (another peer, or the landing shard itself);
* a routed OpenAI chat stream (the official ``openai`` client) does the same, its final chunk
  naming the new shard in a ``themis`` field;
* a routed non-streamed ``/v1/completions`` (the official ``openai`` client) runs again on the
  next shard and answers the uninterrupted run's text, the header naming that shard;
* a client connected to the generating shard itself loses its connection with it (nothing can
  relay a dead process's socket): it gets the text sent so far, then a transport error.

Each resumption is counted in ``themis_inference_resumptions_total{kind}``.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.llm, pytest.mark.slow]

#: A domain nobody serves: the request goes to the ring owner of its prompt (the router's choice).
DOMAIN = "nobody-serves-this"
PROMPT = "Write a long story about a lighthouse keeper and the sea. Once upon a time,"
STREAM = {
    "prompt": PROMPT,
    "domain": DOMAIN,
    "max_tokens": 120,
    "temperature": 0,
    "stream": True,
}
#: Sampled with a seed: the continuation starts the generator at the tokens already drawn.
SEEDED = {**STREAM, "prompt": "My favourite memory of the summer is", "temperature": 0.9, "seed": 42}
CHAT = {
    "model": "gemma3-270m",
    "messages": [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}],
    "max_tokens": 100,
    "temperature": 0,
    "extra_body": {"domain": DOMAIN},
}
#: Gossip that suspects a busy shard (2 shared cores) would move the router's choice between two
#: runs of one request; a dead shard is found at once anyway (its connection is refused).
STEADY = {"THEMIS_CLUSTER_SUSPECT_TIMEOUT_S": "120", "THEMIS_CLUSTER_DEAD_TIMEOUT_S": "240"}
COMPLETION = {
    "model": "gemma3-270m",
    "prompt": "The history of the printing press begins",
    "max_tokens": 160,
    "temperature": 0,
    "extra_body": {"domain": DOMAIN},
}


class Stream:
    """One /v1/infer SSE stream as a client reads it."""

    def __init__(
        self, url: str, body: dict, kill_after: int | None = None, kill=None, entry: str | None = None
    ) -> None:
        """``entry``: the shard ``url`` is; a stream it generates itself is left at once
        (``routed`` False): only a routed stream can outlive its shard."""
        self.shard = ""
        self.tokens: list[str] = []
        self.frames: list = []
        with httpx.stream("POST", f"{url}/v1/infer", json=body, timeout=120) as r:
            r.raise_for_status()
            self.shard = r.headers["X-Themis-Shard"]
            self.routed = self.shard != entry
            if not self.routed:
                return
            for line in r.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                frame = data if data == "[DONE]" else json.loads(data)
                self.frames.append(frame)
                if isinstance(frame, dict) and "token" in frame:
                    self.tokens.append(frame["token"])
                    if kill is not None and len(self.tokens) == kill_after:
                        kill(self.shard)

    @property
    def text(self) -> str:
        return "".join(self.tokens)

    @property
    def done(self) -> dict:
        return next(f for f in self.frames if isinstance(f, dict) and f.get("done"))


def metric(url: str, name: str, labels: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and labels in line
    )


def openai_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=120, max_retries=0)


def completion(url: str, **override):
    """(text, X-Themis-Shard) of the routed completion, through the official client."""
    raw = openai_client(url).completions.with_raw_response.create(**{**COMPLETION, **override})
    return raw.parse().choices[0].text, raw.headers["X-Themis-Shard"]


def chat_stream(url: str, kill_after: int | None = None, kill=None, entry: str | None = None):
    """(X-Themis-Shard, text, the chunk that finished the choice) of a streamed chat completion;
    None when ``entry`` (the shard ``url`` is) generates it itself."""
    raw = openai_client(url).chat.completions.with_raw_response.create(**CHAT, stream=True)
    shard, parts, last = raw.headers["X-Themis-Shard"], [], None
    stream = raw.parse()
    if shard == entry:
        stream.close()
        return None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
            if kill is not None and len(parts) == kill_after:
                kill(shard)
        if chunk.choices and chunk.choices[0].finish_reason:
            last = chunk
    return shard, "".join(parts), last


def routed(alive: list[str], attempt):
    """(entry, result) of the first ``attempt(entry)`` the landing shard routed to another shard
    (None: it generated it itself). Which shard a request goes to is each landing shard's own
    view (breakers, gossip), so the test asks rather than predicts."""
    for entry in list(alive):
        result = attempt(entry)
        if result is not None:
            return entry, result
    pytest.fail("no shard routed the request to another")


def test_generations_survive_the_death_of_their_shard(local_cluster) -> None:
    cluster = local_cluster(3, llm=True, env=STEADY)
    alive = list(cluster.ids)

    def kill(shard: str) -> None:
        cluster.kill(shard)
        alive.remove(shard)

    # Uninterrupted references, and the shard each request is generated on.
    reference = Stream(cluster.url(alive[0]), STREAM)
    generator = reference.shard
    assert generator in cluster.ids and reference.done["finish_reason"] == "length"
    assert reference.done["tokens"] == 120 and "themis" not in reference.done
    ref_completion, _ = completion(cluster.url(alive[0]))
    assert len(ref_completion) > 200
    _, ref_chat, ref_last = chat_stream(cluster.url(alive[0]))
    assert ref_last is not None and not (ref_last.model_extra or {}).get("themis")

    # 1. Non-streamed, routed, through the official openai client: it runs again elsewhere.
    _, generator = completion(cluster.url(alive[0]), max_tokens=1)  # where it is generated now
    entry = next(s for s in alive if s != generator)
    answer: dict = {}

    def call() -> None:
        answer["text"], answer["shard"] = completion(cluster.url(entry))

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 60
    while metric(cluster.url(generator), "themis_llm_running_sequences", "") < 1:
        assert time.monotonic() < deadline, "the routed completion never started on its shard"
        time.sleep(0.05)
    time.sleep(0.5)  # a few tokens into it
    kill(generator)
    caller.join(120)
    assert answer["text"] == ref_completion and answer["shard"] in alive and answer["shard"] != generator
    assert metric(cluster.url(entry), "themis_inference_resumptions_total", 'kind="request"') == 1

    # 2. A greedy /v1/infer stream, routed (it lands on a shard that is not the generating one).
    def greedy(entry: str):
        s = Stream(cluster.url(entry), STREAM, kill_after=20, kill=kill, entry=entry)
        return s if s.routed else None

    entry, moved = routed(alive, greedy)
    assert moved.shard not in alive  # killed after 20 tokens
    assert moved.text == reference.text  # no token lost, none repeated
    resumed_on = moved.done["themis"]["resumed_on"]
    assert resumed_on in alive and moved.done["themis"]["resumptions"] == 1
    assert moved.done["shard_id"] == resumed_on and moved.done["tokens"] == 120
    assert moved.frames[-1] == "[DONE]" and not any("error" in f for f in moved.frames if isinstance(f, dict))
    assert metric(cluster.url(entry), "themis_inference_resumptions_total", 'kind="stream"') == 1
    assert alive == [entry] and resumed_on == entry  # the last shard continued it itself
    for shard in set(cluster.ids) - set(alive):  # back to three shards
        cluster.start(shard)
        alive.append(shard)

    # 3. Sampled with a seed: the same draws after the move.
    seeded_reference = Stream(cluster.url(alive[0]), SEEDED)

    def seeded_run(entry: str):
        s = Stream(cluster.url(entry), SEEDED, kill_after=20, kill=kill, entry=entry)
        return s if s.routed else None

    entry, seeded = routed(alive, seeded_run)
    assert seeded.text == seeded_reference.text and len(seeded.tokens) > 20
    assert seeded.done["themis"]["resumed_on"] in alive

    # 4. An OpenAI chat stream through the official client.
    entry, (shard, chat_text, last) = routed(
        alive, lambda entry: chat_stream(cluster.url(entry), kill_after=10, kill=kill, entry=entry)
    )
    assert shard not in alive and chat_text == ref_chat
    themis = (last.model_extra or {})["themis"]
    assert themis["resumed_on"] in alive and last.system_fingerprint == f"themis:{themis['resumed_on']}"

    # 5. A client connected to the generating shard itself (no domain: it runs where it lands)
    # loses the stream with it: the frames sent so far, then a broken connection.
    seen: list[str] = []

    def kill_and_keep(shard: str) -> None:
        seen.append(shard)
        kill(shard)

    here = {k: v for k, v in STREAM.items() if k != "domain"}
    last = alive[0]
    with pytest.raises(httpx.TransportError):
        Stream(cluster.url(last), here, kill_after=20, kill=kill_and_keep)
    assert seen == [last]
