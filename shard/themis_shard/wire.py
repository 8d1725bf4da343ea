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
