"""Spec: the text of a stream resumed after tokens already sent comes out as in one run: a
character split across the seam, and a stop string spanning it, are handled as if the sending
shard had never died (``inference.local.Continuation``; the engine's own assembler sees only
the new tokens)."""

from __future__ import annotations

from themis_shard.inference.local import Continuation
from themis_shard.llm.sequence import DoneEvent
from themis_shard.llm.text import TextAssembler

PIECES = {
    1: b"Hello",
    2: b" w",
    3: b"orld",
    4: b" \xc3",
    5: b"\xa9t\xc3\xa9",
    6: b" EN",
    7: b"D!",
    8: b" more",
}


def whole(tokens, stop=()) -> str:
    a = TextAssembler(stop)
    return "".join(a.feed(PIECES[t]) for t in tokens) + a.flush()


def resumed(tokens, at: int, stop=()) -> tuple[str, Continuation]:
    """What the dead shard released for tokens[:at], then what the continuation releases."""
    a = TextAssembler(stop)
    before = "".join(a.feed(PIECES[t]) for t in tokens[:at])
    cont = Continuation(tokens[:at], stop, PIECES.__getitem__)
    after = ""
    for t in tokens[at:]:
        if cont.text.stopped:
            break
        after += cont.feed(t)
    done = DoneEvent("length", "", 10, 2, None, 0.0, None, 0)
    tail, _ = cont.done(done)
    return before + after + tail, cont


def test_a_character_split_across_the_seam_is_whole():
    tokens = [1, 2, 3, 4, 5, 8]
    for at in range(1, len(tokens)):
        assert resumed(tokens, at)[0] == whole(tokens) == "Hello world été more"


def test_a_stop_string_spanning_the_seam_stops_the_continuation():
    tokens = [1, 2, 3, 6, 7, 8]
    text, cont = resumed(tokens, 4, stop=("END",))
    assert text == whole(tokens, ("END",)) == "Hello world "
    assert cont.text.stopped


def test_the_result_counts_the_tokens_sent_before_the_seam():
    cont = Continuation([1, 2, 3], (), PIECES.__getitem__)
    cont.feed(8)
    _, done = cont.done(DoneEvent("length", " more", 13, 1, None, 0.0, None, 0))
    assert (done.prompt_tokens, done.completion_tokens, done.text) == (10, 4, " more")
