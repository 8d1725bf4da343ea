"""Function calling: the grammar a tool call must follow, and reading the call back (pure).

A call is one JSON object ``{"name": ..., "arguments": {...}}`` whose ``arguments`` match that
tool's JSON Schema; the grammar admits exactly these (one ``oneOf`` branch per tool), so even a
weak model's call always parses and validates. With ``tool_choice: auto`` the model may instead
answer in text: the grammar then admits a call, or text that does not start with ``{``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .grammar import join_rules, schema_grammar

#: Text the model writes instead of a call under ``tool_choice: auto``.
_FREE_TEXT = "root ::= tool-call | themis-text\nthemis-text ::= [^{ \\t\\n] [^\\x00]*"


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON Schema of one call to any of ``tools`` (OpenAI tool dicts)."""
    branches = []
    for t in tools:
        f = t["function"]
        branches.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": f["name"]},
                    "arguments": f.get("parameters") or {"type": "object", "properties": {}},
                },
                "required": ["name", "arguments"],
            }
        )
    return branches[0] if len(branches) == 1 else {"oneOf": branches}


def tool_grammar(tools: list[dict[str, Any]], *, required: bool) -> str:
    """GBNF for a forced call (``required`` / a named tool), or a call-or-text (``auto``)."""
    call = schema_grammar(call_schema(tools))
    if required:
        return call
    return join_rules(re.sub(r"^root ::=", "tool-call ::=", call, count=1, flags=re.M), _FREE_TEXT)


def parse_call(text: str) -> tuple[str, str] | None:
    """(name, arguments as a JSON string) when ``text`` is a call, else None (it is text)."""
    s = text.strip()
    if not s.startswith("{"):
        return None
    try:
        obj = json.loads(s)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or "arguments" not in obj:
        return None
    return obj["name"], json.dumps(obj["arguments"], ensure_ascii=False)
