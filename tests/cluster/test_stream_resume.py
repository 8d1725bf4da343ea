"""Spec: a routed stream outlives the shard generating it (``cluster/routing/resume.py``).

The router keeps every token id the peer sampled (its ``event: token`` records, never relayed),
relays every other event unchanged, and when the peer's stream breaks it opens the continuation
(``resume.tokens``) on a shard that has not failed this stream; the final frame names the shard
it moved to. Out of shards or out of resumptions, the stream ends in-band with
``shard_unavailable``."""

from __future__ import annotations

import asyncio
import json

from themis_shard.cluster.routing.resume import Opened, resumable_stream, sse_events
from themis_shard.cluster.transport.remote import PeerUnavailable


def sse(data) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def peer(shard: str, frames: list[bytes], *, dies: bool) -> Opened:
    async def chunks():
        for f in frames:
            # cut each event in two, as a socket may
            yield f[:3]
            yield f[3:]
        if dies:
            yield b'data: {"tok'  # a torn event: never relayed
            raise PeerUnavailable(shard, "transport_error", "peer closed connection")

    return Opened(shard, chunks())


def tokens(*pairs) -> list[bytes]:
    """Each token's record, then its frame when it released text (as ``/internal/infer`` sends)."""
    out = []
    for t, i in pairs:
        out.append(b"event: token\ndata: %d\n\n" % i)
        if t:
            out.append(sse({"token": t, "id": i}))
    return out


DONE = {"done": True, "finish_reason": "length", "shard_id": "s-2", "tokens": 4}


def run(first: Opened, continuations: dict[str, list[bytes]], *, limit: int = 2, body=None):
    asked: list[tuple[dict, frozenset]] = []
    resumed: list[int] = []

    async def reopen(cont: dict, tried: frozenset) -> Opened:
        asked.append((cont, tried))
        left = [s for s in continuations if s not in tried]
        if not left:
            raise RuntimeError("no shard could serve the request")
        shard = left[0]
        return peer(shard, continuations[shard], dies=not continuations[shard][-1].endswith(b"[DONE]\n\n"))

    async def collect() -> list:
        out = []
        stream = resumable_stream(
            first,
            body or {"prompt": "p", "stream": True},
            reopen,
            limit=limit,
            on_resume=lambda: resumed.append(1),
        )
        async for event in sse_events(stream):
            text = event.decode()[5:].strip()
            out.append(text if text == "[DONE]" else json.loads(text))
        return out

    return asyncio.run(collect()), asked, len(resumed)


def test_a_stream_whose_peer_dies_continues_on_another_shard_after_the_tokens_sent():
    first = peer("s-1", tokens(("A", 10), ("", 11), ("B", 12)), dies=True)
    events, asked, resumed = run(first, {"s-2": [*tokens(("C", 13), ("D", 14)), sse(DONE), sse("[DONE]")]})
    assert [e["token"] for e in events if "token" in e] == ["A", "B", "C", "D"]  # no gap, no repeat
    cont, tried = asked[0]
    assert cont["resume"] == {"tokens": [10, 11, 12]} and cont["prompt"] == "p"
    assert tried == {"s-1"}
    assert events[-2]["themis"] == {"resumed_on": "s-2", "resumptions": 1}
    assert events[-2]["shard_id"] == "s-2" and events[-1] == "[DONE]"
    assert resumed == 1


def test_a_stream_that_never_breaks_is_relayed_without_the_text_less_frames():
    first = peer("s-1", [*tokens(("A", 1), ("", 2), ("B", 3)), sse(DONE), sse("[DONE]")], dies=False)
    events, asked, resumed = run(first, {})
    assert [e.get("token") for e in events[:-2]] == ["A", "B"]
    assert "themis" not in events[-2] and asked == [] and resumed == 0


def test_a_stream_ending_without_done_is_a_lost_peer_too():
    first = Opened("s-1", _iter(tokens(("A", 1))))
    events, asked, _ = run(first, {"s-2": [*tokens(("B", 2)), sse(DONE), sse("[DONE]")]})
    assert [e["token"] for e in events if "token" in e] == ["A", "B"]
    assert asked[0][0]["resume"]["tokens"] == [1]


def test_each_move_excludes_every_shard_that_failed_the_stream():
    first = peer("s-1", tokens(("A", 1)), dies=True)
    events, asked, resumed = run(
        first,
        {"s-2": tokens(("B", 2)), "s-3": [*tokens(("C", 3)), sse(DONE), sse("[DONE]")]},
    )
    assert [e["token"] for e in events if "token" in e] == ["A", "B", "C"]
    assert [a[1] for a in asked] == [{"s-1"}, {"s-1", "s-2"}]
    assert asked[1][0]["resume"]["tokens"] == [1, 2]
    assert events[-2]["themis"] == {"resumed_on": "s-3", "resumptions": 2} and resumed == 2


def test_with_no_shard_left_the_stream_ends_in_band():
    first = peer("s-1", tokens(("A", 1)), dies=True)
    events, _, resumed = run(first, {})
    assert events[-2]["error"]["code"] == "shard_unavailable"
    assert "no other shard could resume" in events[-2]["error"]["message"]
    assert events[-1] == "[DONE]" and resumed == 0


def test_the_resumption_budget_bounds_the_moves():
    first = peer("s-1", tokens(("A", 1)), dies=True)
    events, asked, resumed = run(first, {"s-2": tokens(("B", 2)), "s-3": tokens(("C", 3))}, limit=1)
    assert [e.get("token") for e in events if "token" in e] == ["A", "B"]
    assert (
        events[-2]["error"]["code"] == "shard_unavailable"
        and "resumed 1 times" in events[-2]["error"]["message"]
    )
    assert len(asked) == 1 and resumed == 1


def test_a_peer_lost_after_its_last_allowed_token_is_still_closed_by_a_continuation():
    """The continuation replays every token, samples none, and sends the closing frame in the
    stream's own shape (``done``, or an OpenAI chunk)."""
    first = peer("s-1", tokens(("A", 1), ("B", 2)), dies=True)
    events, asked, _ = run(
        first, {"s-2": [sse(DONE), sse("[DONE]")]}, body={"prompt": "p", "stream": True, "max_tokens": 2}
    )
    assert asked[0][0]["resume"]["tokens"] == [1, 2]
    assert [e.get("token") for e in events[:2]] == ["A", "B"] and events[2]["themis"]["resumed_on"] == "s-2"


async def _iter(items):
    for i in items:
        yield i


def chunk(text: str | None, finish: str | None = None, **extra) -> dict:
    choices = [] if text is None else [{"index": 0, "text": text, "finish_reason": finish}]
    return {"id": "cmpl-1", "created": 7, "object": "text_completion", "choices": choices, **extra}


def test_an_openai_stream_keeps_its_chunk_identity_and_names_the_new_shard_at_its_end():
    first = peer("s-1", [b"event: token\ndata: 5\n\n", sse(chunk("A"))], dies=True)
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    events, asked, _ = run(
        first,
        {
            "s-2": [
                b"event: token\ndata: 6\n\n",
                sse(chunk("B")),
                sse(chunk("", "length")),
                sse(chunk(None, usage=usage)),
                sse("[DONE]"),
            ]
        },
    )
    assert asked[0][0]["resume"] == {"tokens": [5], "id": "cmpl-1", "created": 7}
    assert [e["choices"][0]["text"] for e in events[:3]] == ["A", "B", ""]
    assert "themis" not in events[1]  # only the closing chunks say it
    assert events[2]["themis"] == events[3]["themis"] == {"resumed_on": "s-2", "resumptions": 1}
    assert events[3]["usage"] == usage and "shard_id" not in events[3]
