"""Spec: the RAG prompt, shared by /v1/rag and AQL's RAG."""

from __future__ import annotations

from themis_shard.rag.prompt import build_prompt, passage_text, prompt_order


def test_a_passage_is_the_embed_field_then_text_content_body_then_json() -> None:
    assert passage_text({"para": "A", "text": "B"}, "para") == "A"
    assert passage_text({"content": "C", "body": "D"}) == "C"
    assert passage_text({"title": "T", "_key": "k", "embedding": [1.0]}) == '{"title": "T"}'


def test_the_prompt_numbers_the_passages_cuts_them_and_ends_with_the_question() -> None:
    prompt = build_prompt("Why?", ["first passage", "x" * 50], passage_chars=10)
    assert "[1] first pass\n[2] xxxxxxxxxx\n" in prompt
    assert prompt.endswith("Question: Why?\nAnswer:")


def test_passages_are_listed_in_urn_order_so_the_same_documents_make_the_same_prefix() -> None:
    hits = [{"urn": "urn:themis:c:b", "score": 0.9}, {"urn": "urn:themis:c:a", "score": 0.5}]
    assert [h["urn"] for h in prompt_order(hits)] == ["urn:themis:c:a", "urn:themis:c:b"]
    assert prompt_order(list(reversed(hits))) == prompt_order(hits)
    pairs = [(0.9, {"_urn": "urn:themis:c:z"}), (0.1, {"_urn": "urn:themis:c:y"})]
    assert [d["_urn"] for _, d in prompt_order(pairs, urn=lambda h: h[1]["_urn"])] == [
        "urn:themis:c:y",
        "urn:themis:c:z",
    ]
