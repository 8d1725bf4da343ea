"""Spec: the grammar of ``tool_choice: auto`` (a call or text) is well-formed GBNF: the call's
rules and the text rules each start on their own line (the converter's output ends without a
newline, and joining them without one fused two rules into one that llama.cpp refused), one
``root``, no rule defined twice. The real-model answer is in test_openai_surface_llm.py."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("llama_cpp")

from themis_shard.llm.grammar import join_rules
from themis_shard.llm.tool_calls import tool_grammar

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
RULE = re.compile(r"^([A-Za-z0-9-]+) ::= ")


@pytest.mark.parametrize("tools", [[WEATHER], [WEATHER, TIME]])
@pytest.mark.parametrize("required", [False, True])
def test_every_rule_starts_its_own_line_and_is_defined_once(tools, required):
    names = [
        m.group(1) for line in tool_grammar(tools, required=required).splitlines() if (m := RULE.match(line))
    ]
    assert names.count("root") == 1
    assert len(names) == len(set(names)), names
    if not required:
        assert {"tool-call", "themis-text"} <= set(names)


def test_rule_sets_join_on_line_boundaries_whatever_their_ends():
    assert join_rules("a ::= b", "c ::= d\n", "e ::= f") == "a ::= b\nc ::= d\ne ::= f\n"
