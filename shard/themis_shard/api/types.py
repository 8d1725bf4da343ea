"""Request models of the inference routes (``/v1/infer``, ``/v1/embed``, adapters, OpenAI).

Validation lives in these models so a malformed body is refused (400, rendered by api/errors.py)
before any work starts; field names and defaults are the public API (API.md).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import BadRequest
from ..inference.local import InferRequest
from ..storage.names import URN_PATTERN
from .params import exactly_one_of

# -- /v1/infer, /v1/infer:batch -----------------------------------------------------------------


class InferBody(InferRequest):
    """``/v1/infer``'s body: exactly the inference layer's request (one field list, one validation)."""

    def request(self) -> InferRequest:
        return self


def infer_item(raw: dict[str, Any], where: str) -> InferBody:
    """One batch item, validated like a ``/v1/infer`` body; a bad one refuses the whole batch (400)."""
    try:
        return InferBody.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise BadRequest(f"{where}: {loc}: {first.get('msg')}", code="invalid_request") from None


#: Checked by the engine per item: a bad value is that item's ``{"error"}``, not the batch's 400.
_IN_PLACE = ("prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop")
_LIMITS = frozenset({"minimum", "maximum", "exclusiveMinimum", "minLength", "maxItems"})


def _shape(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _shape(v) for k, v in schema.items() if k not in _LIMITS}
    if isinstance(schema, list):
        return [_shape(v) for v in schema]
    return schema


def _batch_item_schema() -> dict[str, Any]:
    """A ``/v1/infer`` body that does not stream (the batch streams as a whole). Only its shape
    refuses the batch; the engine's limits are judged per item (``_IN_PLACE``)."""
    schema = InferBody.model_json_schema()
    props = schema["properties"]
    for name in _IN_PLACE:
        props[name] = _shape(props[name])
    props["stream"] = {"const": False, "default": False}
    return schema


class InferBatchBody(BaseModel):
    """Items stay raw JSON here and are validated one by one (``infer_item``), so an error names
    the item (``requests[3]: ...``) and the size limit is the shard's setting (413), not a 422."""

    model_config = ConfigDict(strict=True, extra="forbid")

    requests: list[dict[str, Any]] = Field(
        ..., min_length=1, json_schema_extra=lambda s: s.update(items=_batch_item_schema())
    )
    #: NDJSON stream of ``{"index", ...result}`` lines as items complete (first answers early).
    stream: bool = False
    #: Collective timeout of the scatter-gather (paper: T_scatter = 30 s).
    timeout_s: float = Field(30.0, gt=0, le=600)


# -- /v1/embed ------------------------------------------------------------------------------------


class EmbedBody(BaseModel):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra=exactly_one_of(texts={"type": "array"}, urns={"type": "array"}),
    )

    texts: list[str] | None = None
    urns: list[Annotated[str, Field(json_schema_extra={"pattern": URN_PATTERN})]] | None = None


class EmbedUrnsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    urns: list[str] = Field(..., min_length=1, max_length=4096)


# -- /v1/adapters ---------------------------------------------------------------------------------


class AdapterBody(BaseModel):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",  # an unknown field is unsupported_parameter, as on every route
        json_schema_extra={
            "anyOf": [
                {"required": ["path"], "properties": {"path": {"type": "string", "minLength": 1}}},
                {"required": ["source"], "properties": {"source": {"type": "string", "minLength": 1}}},
            ]
        },
    )

    name: str = Field(..., json_schema_extra={"pattern": r"^[a-z0-9_.-]{1,64}$"})
    domain: str | None = None
    path: str | None = None
    #: A path on this shard, or an http(s) URL the shard fetches onto its weights volume.
    source: str | None = None
    #: The file's sha256; a mismatch is refused (400 sha256_mismatch).
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    scale: float = 1.0
    model: str | None = None
    evaluate: bool | None = None
