"""Names the handlers check (``storage.names``), stated in the OpenAPI schema as well, so a
client or a fuzzer knows what a valid collection name or document key is. The schema only
describes: the handler's own check stays the one that refuses, with its specific code
(``invalid_collection_name``, ``invalid_key``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Header, Path
from pydantic import Field
from starlette.convertors import Convertor

from ..storage.names import COLLECTION_PATTERN, KEY_PATTERN
from .deps import IF_MATCH_PATTERN

COLLECTION_TEXT = "1-64 of [a-z0-9_-]"
KEY_TEXT = "1-256 URL-safe characters [A-Za-z0-9._~-], not '.' or '..'"

CollectionName = Annotated[
    str, Path(description=COLLECTION_TEXT, json_schema_extra={"pattern": COLLECTION_PATTERN})
]
DocumentKey = Annotated[str, Path(description=KEY_TEXT, json_schema_extra={"pattern": KEY_PATTERN})]


def _if_match_schema(schema: dict[str, Any]) -> None:
    """A header is a string when present (never null)."""
    schema.pop("anyOf", None)
    schema.update(type="string", pattern=IF_MATCH_PATTERN)


IfMatch = Annotated[
    str | None,
    Header(
        description="the document version the write expects (409 version_conflict otherwise)",
        json_schema_extra=_if_match_schema,
    ),
]


def collection_field(description: str = COLLECTION_TEXT) -> Any:
    """A body's collection name (required), documented with its rule."""
    return Field(..., description=description, json_schema_extra={"pattern": COLLECTION_PATTERN})


def exactly_one_of(**fields: dict[str, Any]) -> dict[str, Any]:
    """A model's ``json_schema_extra``: exactly one of these fields set (not null), as the
    handler requires; each value is the field's schema when set."""
    return {"oneOf": [{"required": [name], "properties": {name: schema}} for name, schema in fields.items()]}


def key_field() -> Any:
    return Field(..., description=KEY_TEXT, json_schema_extra={"pattern": KEY_PATTERN})


class NameBeforeAction(Convertor):
    """A name in a path followed by ``:action``: no ``/`` and no ``:``, so ``/x/{name}:action``
    is the action only (Starlette's plain ``{name}`` would match it too, and a 405 there would
    advertise the plain route's methods). Names the handler refuses still reach it for a clear
    400. Register it under a name (``register_url_convertor``): registering again is harmless."""

    regex = "[^/:]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value
