"""Incremental detokenisation: only final text is released; stop strings are cut, never shown."""

from themis_shard.llm.text import TextAssembler


def feed_all(asm: TextAssembler, pieces: list[bytes]) -> list[str]:
    return [asm.feed(p) for p in pieces]


def test_plain_pieces_pass_through():
    asm = TextAssembler()
    assert feed_all(asm, [b"Hello", b" world"]) == ["Hello", " world"]
    assert asm.flush() == "" and asm.text == "Hello world"


def test_split_utf8_character_waits_for_its_last_byte():
    euro = "€".encode()
    asm = TextAssembler()
    assert feed_all(asm, [b"a", euro[:1], euro[1:2], euro[2:]]) == ["a", "", "", "€"]


def test_stop_string_spanning_tokens_is_cut():
    asm = TextAssembler(stop=("\n\n",))
    out = feed_all(asm, [b"one", b"\n", b"\ntwo"])
    assert out == ["one", "", ""] and asm.stopped and asm.text == "one"
    assert asm.feed(b"more") == "" and asm.flush() == ""


def test_false_alarm_prefix_is_released_later():
    asm = TextAssembler(stop=("END",))
    assert feed_all(asm, [b"E", b"N", b"d"]) == ["", "", "ENd"]
    assert asm.feed(b" EN") == " "
    assert asm.flush() == "EN" and asm.text == "ENd EN"


def test_earliest_of_several_stops_wins():
    asm = TextAssembler(stop=("a", "cat"))
    asm.feed(b"the cat")
    assert asm.stopped and asm.text == "the "
