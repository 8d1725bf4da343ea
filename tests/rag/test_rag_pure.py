"""Spec: the RAG prompt (shared by /v1/rag and AQL's RAG) and where a RAG answer is generated."""

from __future__ import annotations

from themis_shard.rag.placement import generation_shard
from themis_shard.rag.prompt import build_prompt, passage_text


def test_a_passage_is_the_embed_field_then_text_content_body_then_json() -> None:
    assert passage_text({"para": "A", "text": "B"}, "para") == "A"
    assert passage_text({"content": "C", "body": "D"}) == "C"
    assert passage_text({"title": "T", "_key": "k", "embedding": [1.0]}) == '{"title": "T"}'


def test_the_prompt_numbers_the_passages_cuts_them_and_ends_with_the_question() -> None:
    prompt = build_prompt("Why?", ["first passage", "x" * 50], passage_chars=10)
    assert "[1] first pass\n[2] xxxxxxxxxx\n" in prompt
    assert prompt.endswith("Question: Why?\nAnswer:")


OWNERS = {"a": ["s1", "s2"], "b": ["s1", "s0"], "c": ["s2", "s0"], "d": ["s0", "s1"]}


def test_generation_goes_to_the_shard_holding_most_passages() -> None:
    assert generation_shard(["c", "a", "b"], OWNERS.__getitem__, "s0") == "s0"  # s0 holds c and b
    assert generation_shard(["a", "b"], OWNERS.__getitem__, "s2") == "s2"  # s2 holds a's copy
    assert generation_shard(["a", "b", "c"], OWNERS.__getitem__, "s3") == "s1"


def test_ties_go_to_this_shard_then_to_the_better_hit() -> None:
    assert generation_shard(["c", "a"], {"c": ["s2"], "a": ["s1"]}.__getitem__, "s9") == "s2"
    assert generation_shard(["c", "a"], {"c": ["s2"], "a": ["s9"]}.__getitem__, "s9") == "s9"


def test_unavailable_shards_are_skipped_and_no_owner_means_here() -> None:
    owners = {"a": ["s1", "s2"], "b": ["s1", "s2"]}.__getitem__
    assert generation_shard(["a", "b"], owners, "s0", unavailable={"s1"}) == "s2"
    assert generation_shard(["a", "b"], owners, "s0", unavailable={"s1", "s2"}) == "s0"
    assert generation_shard([], owners, "s0") == "s0"
