"""Chat templates: the GGUF's own Jinja template when it has one, the family's turn format when
it has none; tool calls and results in the history become turns every template can render."""

import pytest
from themis_shard.llm.chat_template import ChatTemplate, ChatTemplateError
from themis_shard.llm.tool_calls import call_schema, parse_call

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def test_gemma_without_a_template_uses_its_turn_format_and_folds_the_system_text():
    t = ChatTemplate.for_model(None, "gemma3")
    assert t.origin == "fallback:gemma"
    assert t.render(MSGS) == "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_unknown_families_fall_back_to_chatml():
    t = ChatTemplate.for_model(None, "mystery")
    assert t.render(MSGS).endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_the_ggufs_own_jinja_template_is_rendered():
    src = (
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}[bot]{% endif %}"
    )
    assert ChatTemplate.for_model(src, "llama").render(MSGS) == "[system]Be brief.[user]Hi[bot]"


def test_templates_are_sandboxed_and_their_errors_are_ours():
    with pytest.raises(ChatTemplateError):
        ChatTemplate.for_model("{{ raise_exception('no system role') }}", "x").render(MSGS)
    with pytest.raises(ChatTemplateError):
        ChatTemplate.for_model("{{ ''.__class__.__mro__[1].__subclasses__() }}", "x").render(MSGS)


def test_tool_calls_and_results_become_turns():
    history = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": '{"city": "Rome"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "21 C"},
    ]
    tools = [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]
    out = ChatTemplate.for_model(None, "gemma3").render(history, tools)
    assert '"name": "w"' in out.split("<start_of_turn>user\n", 1)[1]  # tools described in the first turn
    assert '<start_of_turn>model\n{"name": "w", "arguments": {"city": "Rome"}}<end_of_turn>' in out
    assert "Result of c1: 21 C" in out


def test_a_call_parses_back_and_text_does_not():
    assert parse_call('{"name": "w", "arguments": {"city": "Rome"}}') == ("w", '{"city": "Rome"}')
    assert parse_call("It is sunny.") is None
    assert parse_call('{"name": "w"') is None


def test_one_tool_is_its_own_schema_several_are_one_of():
    one = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}]
    assert call_schema(one)["properties"]["name"] == {"const": "a"}
    assert len(call_schema(one * 2)["oneOf"]) == 2
