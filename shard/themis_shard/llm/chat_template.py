"""Chat templates: OpenAI-style messages → one prompt string, rendered with Jinja.

The GGUF's own ``tokenizer.chat_template`` is rendered in a sandbox, as ``llama.cpp --jinja``
and Hugging Face's ``apply_chat_template`` do (the same variables: ``messages``,
``add_generation_prompt``, ``bos_token``, ``eos_token``, ``raise_exception``). A GGUF without one
(the bundled Gemma 3 270M base model) gets its family's own turn format from ``FALLBACKS``.

Tools are described to the model in the system text, in the one call format the tool grammar
(``tools.py``) enforces, rather than through a template's native tool syntax: what the model is
told and what it is allowed to write must agree. Pure: no llama.cpp here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

GEMMA = (
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}{{ '<start_of_turn>model\\n' + m.content + '<end_of_turn>\\n' }}"
    "{% else %}{{ '<start_of_turn>user\\n' + m.content + '<end_of_turn>\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

#: Turn formats by ``general.architecture`` prefix, for GGUFs without a template of their own.
FALLBACKS: dict[str, str] = {"gemma": GEMMA}

#: Families whose turn format has no system role: the system text opens the first user turn.
NO_SYSTEM_ROLE = ("gemma",)


class ChatTemplateError(ValueError):
    """The template could not render these messages (rendered as 400)."""


def tool_instructions(tools: list[dict[str, Any]]) -> str:
    """How the model is told about tools: each function and the one JSON shape of a call."""
    lines = [
        "You can call these functions. To call one, answer with only a JSON object "
        '{"name": <function name>, "arguments": <arguments object>}.'
    ]
    for t in tools:
        f = t.get("function", {})
        lines.append(
            json.dumps(
                {
                    "name": f.get("name"),
                    "description": f.get("description", ""),
                    "parameters": f.get("parameters", {}),
                },
                ensure_ascii=False,
            )
        )
    return "\n".join(lines)


def _call_text(call: dict[str, Any]) -> str:
    f = call.get("function", {})
    args = f.get("arguments", "{}")
    try:
        parsed = json.loads(args) if isinstance(args, str) else args
    except ValueError:
        parsed = args
    return json.dumps({"name": f.get("name"), "arguments": parsed}, ensure_ascii=False)


def flatten(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, system_role: bool
) -> list[dict]:
    """Messages as plain (role, content) turns every template renders: assistant tool calls
    become the JSON the model writes, tool results become user-side turns naming the call, and
    (for families without a system role) the system text opens the first user turn."""
    system = [m["content"] for m in messages if m["role"] == "system" and m.get("content")]
    if tools:
        system.append(tool_instructions(tools))
    turns: list[dict] = []
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            continue
        if role == "assistant" and m.get("tool_calls"):
            calls = "\n".join(_call_text(c) for c in m["tool_calls"])
            content = f"{content}\n{calls}".strip()
        elif role == "tool":
            who = m.get("name") or m.get("tool_call_id") or "the function"
            role, content = "user", f"Result of {who}: {content}"
        turns.append({"role": role, "content": content})
    if system:
        text = "\n\n".join(system)
        if system_role:
            turns.insert(0, {"role": "system", "content": text})
        elif turns and turns[0]["role"] == "user":
            turns[0] = {"role": "user", "content": f"{text}\n\n{turns[0]['content']}"}
        else:
            turns.insert(0, {"role": "user", "content": text})
    return turns


@dataclass(frozen=True)
class ChatTemplate:
    source: str
    #: where the template came from: "gguf" or "fallback:<family>"
    origin: str
    system_role: bool = True
    eos_token: str = ""
    compiled: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.compiled is None:
            object.__setattr__(self, "compiled", _compile(self.source))

    @classmethod
    def for_model(cls, gguf_template: str | None, architecture: str, eos_token: str = "") -> ChatTemplate:
        if gguf_template:
            return cls(gguf_template, "gguf", True, eos_token)
        family = next((f for f in FALLBACKS if architecture.startswith(f)), None)
        if family is None:
            return cls(CHATML, "fallback:chatml", True, eos_token)
        return cls(
            FALLBACKS[family], f"fallback:{family}", not architecture.startswith(NO_SYSTEM_ROLE), eos_token
        )

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        """The prompt for ``messages`` with the assistant's turn opened. The model's BOS is
        added by the tokenizer, so a template's leading ``bos_token`` renders as ""."""
        turns = flatten(messages, tools, system_role=self.system_role)
        try:
            return self.compiled.render(
                messages=turns,
                add_generation_prompt=True,
                bos_token="",
                eos_token=self.eos_token,
            )
        except TemplateError as exc:
            raise ChatTemplateError(f"the chat template could not render these messages: {exc}") from None


def _raise(message: str) -> None:
    raise TemplateError(message)


_ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
_ENV.globals["raise_exception"] = _raise
_ENV.filters["tojson"] = lambda v, indent=None: json.dumps(v, ensure_ascii=False, indent=indent)


def _compile(source: str):
    try:
        return _ENV.from_string(source)
    except TemplateError as exc:
        raise ChatTemplateError(f"the model's chat template does not compile: {exc}") from None
