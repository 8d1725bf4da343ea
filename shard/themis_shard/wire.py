"""Field types of JSON request bodies, read as their JSON Schema reads them.

JSON has one number type: ``256.0`` is an integer to JSON Schema (and to every client that
writes numbers as floats), while pydantic's strict mode, which keeps ``"5"`` from passing as 5,
refuses it. ``JsonInt`` takes an integral float as the integer it is and nothing else more than
strict ``int`` does, so a body valid by the documented schema is accepted.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral)]


_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def json_bounds(schema: Any) -> Any:
    """``schema`` with pydantic's bound names (which it leaves on constrained ``JsonInt`` fields)
    renamed to JSON Schema's, in place, at any depth."""
    if isinstance(schema, dict):
        for ours, theirs in _BOUNDS.items():
            if ours in schema and isinstance(schema[ours], int | float) and "type" in schema:
                schema[theirs] = schema.pop(ours)
        for value in schema.values():
            json_bounds(value)
    elif isinstance(schema, list):
        for item in schema:
            json_bounds(item)
    return schema
