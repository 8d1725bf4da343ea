"""The OpenAI request bodies: every field OpenAI defines is declared, and is either honoured or
refused by name (``unsupported_parameter``, 400); an unknown field is refused by pydantic
(``extra="forbid"``, rendered as 400 ``unsupported_parameter`` naming it).

``refusals`` lists the declared fields a request set to something this server does not do;
``sampling`` turns what it does do into the engine's terms. The table of what is honoured is
in the module docstring of ``openai_local``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from ..errors import BadRequest
from ..wire import JsonInt, json_bounds

#: The engine's lowest scheduling priority (what Batch API lines run at).
LOWEST_PRIORITY = -1000


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> Any:
        """Bounds on ``JsonInt`` fields come out as pydantic's own names (``ge``, ``le``); the
        document says them in JSON Schema's (``minimum``, ``maximum``), which clients read."""
        json_schema = handler(core_schema)
        json_bounds(handler.resolve_ref_schema(json_schema))
        return json_schema


class StreamOptions(_Strict):
    include_usage: bool = False
    #: sent by newer OpenAI SDKs; obfuscation padding is not needed on a trusted network
    include_obfuscation: bool | None = None


class JsonSchemaFormat(_Strict):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "if": {"properties": {"type": {"const": "json_schema"}}},
            "then": {"required": ["json_schema"], "properties": {"json_schema": {"type": "object"}}},
        },
    )

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class FunctionDef(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


# -- what the OpenAPI document says of the fields refused by name ----------------------------------
# They are declared so that a request using them gets a 400 naming the field and the reason; the
# schema admits only the values that are served (null, or the one served value), so a client (or
# a fuzzer) reading the document knows what will be accepted.
_REFUSED = "Refused by name (400 unsupported_parameter) unless "


def _only_null(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update({"type": "null", "description": _REFUSED + "null: not served here."})


def _only_empty_text(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update(
        {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 0}], "description": _REFUSED + "empty."}
    )


def _only_empty_object(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update(
        {
            "anyOf": [{"type": "null"}, {"type": "object", "maxProperties": 0}],
            "description": _REFUSED + "empty: completions are not stored.",
        }
    )


def _not_stored(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update({"enum": [False, None], "description": _REFUSED + "false: completions are not stored."})


def _served_tier(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update({"enum": ["auto", "default", None], "description": _REFUSED + "'auto' or 'default'."})


def _text_modality(schema: dict[str, Any]) -> None:
    schema.clear()
    schema.update(
        {
            "anyOf": [
                {"type": "null"},
                {"type": "array", "items": {"const": "text"}, "minItems": 1, "maxItems": 1},
            ],
            "description": _REFUSED + "['text']: text only.",
        }
    )


def _best_of_schema(schema: dict[str, Any]) -> None:
    schema["description"] = "Only equal to n (every candidate is returned); another value is refused by name."


def _needs(field: str, then: dict[str, Any]) -> dict[str, Any]:
    """JSON Schema for "when ``field`` is set (not null), ``then`` holds"."""
    return {"if": {"required": [field], "properties": {field: {"not": {"type": "null"}}}}, "then": then}


_STREAM_OPTIONS = _needs(
    "stream_options", {"required": ["stream"], "properties": {"stream": {"const": True}}}
)


class StreamResume(_Strict):
    """A stream resumed after the shard generating it died: the tokens it sent (replayed, not
    re-sent) and its chunk ``id`` and ``created``, which the continuation keeps."""

    tokens: list[JsonInt] = Field(..., min_length=1)
    id: str
    created: JsonInt


class _Common(_Strict):
    """What completions and chat completions share."""

    model: str | None = None
    temperature: float | None = Field(1.0, ge=0, le=2)
    top_p: float | None = Field(1.0, gt=0, le=1)
    seed: JsonInt | None = Field(None, ge=0, le=2**53 - 1)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: JsonInt = Field(1, ge=1, le=16)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    #: token id (a decimal string, OpenAI's shape) → bias
    logit_bias: dict[str, float] | None = Field(
        None,
        json_schema_extra={
            "propertyNames": {"pattern": "^[0-9]{1,9}$"},
            "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100},
        },
    )
    #: end-user id: written to the shard's request log, nothing else
    user: str | None = None
    # -- extensions shared with vLLM / llama.cpp server ------------------------------------------
    top_k: JsonInt | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float | None = Field(None, gt=0, le=2)
    # -- Themis extensions (extra_body) ----------------------------------------------------------
    adapter: str | None = None
    domain: str | None = None
    priority: JsonInt = Field(0, ge=LOWEST_PRIORITY, le=1000)
    speculative: bool | None = None
    #: set by the router on ``/internal/openai/...`` only (``inference.local.Resume``)
    resume: SkipJsonSchema[StreamResume | None] = None

    def bias(self) -> dict[int, float] | None:
        """``logit_bias`` keys are token ids as JSON strings (OpenAI's shape)."""
        if not self.logit_bias:
            return None
        out = {}
        for k, v in self.logit_bias.items():
            try:
                out[int(k)] = float(v)
            except ValueError:
                raise BadRequest(
                    f"logit_bias: key {k!r} is not a token id", code="invalid_logit_bias"
                ) from None
        return out

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def check_stream_options(self) -> None:
        if self.stream_options is not None and not self.stream:
            raise BadRequest("stream_options is only allowed with stream: true", code="invalid_request")


def _refuse(name: str, why: str) -> None:
    raise BadRequest(f"{name} is not supported: {why}", code="unsupported_parameter")


def _prompt_schema(schema: dict[str, Any]) -> None:
    """Text, texts, token ids or lists of them: none of them empty (else 400 empty_prompt)."""
    text = {"type": "string", "minLength": 1}
    ids = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
    schema["anyOf"] = [
        text,
        {"type": "array", "items": text, "minItems": 1},
        ids,
        {"type": "array", "items": ids, "minItems": 1},
    ]


def _best_of_equals_n(k: int) -> dict[str, Any]:
    n: dict[str, Any] = {"properties": {"n": {"const": k}}}
    if k != 1:  # n defaults to 1
        n["required"] = ["n"]
    return {"if": {"required": ["best_of"], "properties": {"best_of": {"const": k}}}, "then": n}


COMPLETIONS_DEFAULT_MAX_TOKENS = 16


class CompletionBody(_Common):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={"allOf": [_STREAM_OPTIONS, *(_best_of_equals_n(k) for k in range(1, 17))]},
    )

    prompt: str | list[str] | list[JsonInt] | list[list[JsonInt]] = Field(
        ..., json_schema_extra=_prompt_schema
    )
    #: unset: OpenAI's default of 16 for legacy completions (lowered to the shard's limit)
    max_tokens: JsonInt | None = Field(None, ge=1)
    echo: bool = False
    #: 0..5 alternatives per token (OpenAI's legacy completions limit)
    logprobs: JsonInt | None = Field(None, ge=0, le=5)
    best_of: JsonInt | None = Field(None, ge=1, le=16, json_schema_extra=_best_of_schema)
    suffix: str | None = Field(None, json_schema_extra=_only_empty_text)

    def refusals(self) -> None:
        self.check_stream_options()
        if self.suffix:
            _refuse("suffix", "insertion (fill-in-the-middle) is not served by this model")
        if self.best_of is not None and self.best_of != self.n:
            _refuse("best_of", "only best_of equal to n (every candidate is returned)")

    def prompts(self) -> list[str] | list[list[int]]:
        """One prompt per entry: text, or token ids of this model's vocabulary."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise BadRequest("prompt must not be empty", code="empty_prompt")
        if isinstance(p[0], int):
            return [p]  # type: ignore[list-item]
        return list(p)  # type: ignore[arg-type]


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: str


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "allOf": [
                {  # a tool message answers a call: it names it
                    "if": {"properties": {"role": {"const": "tool"}}},
                    "then": {
                        "required": ["tool_call_id"],
                        "properties": {"tool_call_id": {"type": "string", "minLength": 1}},
                    },
                },
                {  # only the assistant calls tools
                    "if": {
                        "required": ["tool_calls"],
                        "properties": {"tool_calls": {"type": "array", "minItems": 1}},
                    },
                    "then": {"properties": {"role": {"const": "assistant"}}},
                },
            ]
        },
    )

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    #: an assistant turn's refusal text (OpenAI echoes it back in the history)
    refusal: str | None = None

    def as_template(self) -> dict[str, Any]:
        """The dict a chat template renders (``developer`` is the system role)."""
        content = self.content
        if isinstance(content, list):
            content = "".join(p.text for p in content)
        if self.role == "tool" and not self.tool_call_id:
            raise BadRequest("a tool message needs tool_call_id", code="invalid_request")
        if self.tool_calls and self.role != "assistant":
            raise BadRequest("only assistant messages carry tool_calls", code="invalid_request")
        out: dict[str, Any] = {
            "role": "system" if self.role == "developer" else self.role,
            "content": content,
        }
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.name:
            out["name"] = self.name
        return out


class ChatBody(_Common):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "description": "tool_choice naming a function must name one of tools, and tool names are "
            "unique (400 invalid_request otherwise).",
            "allOf": [
                _STREAM_OPTIONS,
                _needs(
                    "top_logprobs", {"required": ["logprobs"], "properties": {"logprobs": {"const": True}}}
                ),
                {  # a tool choice other than "none" needs tools
                    "if": {
                        "required": ["tool_choice"],
                        "properties": {"tool_choice": {"not": {"enum": ["none", None]}}},
                    },
                    "then": {
                        "required": ["tools"],
                        "properties": {"tools": {"type": "array", "minItems": 1}},
                    },
                },
                {  # with tools in play the tool call is the structured output
                    "if": {
                        "required": ["tools", "response_format"],
                        "properties": {
                            "tools": {"type": "array", "minItems": 1},
                            "response_format": {
                                "type": "object",
                                "properties": {"type": {"not": {"const": "text"}}},
                            },
                        },
                    },
                    "then": {"required": ["tool_choice"], "properties": {"tool_choice": {"const": "none"}}},
                },
            ],
        },
    )

    messages: list[ChatMessage] = Field(..., min_length=1)
    max_tokens: JsonInt | None = Field(None, ge=1)
    max_completion_tokens: JsonInt | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: JsonInt | None = Field(None, ge=0, le=20)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    # Declared so that a request using them is refused by name with the reason:
    functions: list[dict[str, Any]] | None = Field(None, json_schema_extra=_only_null)
    function_call: Any = Field(None, json_schema_extra=_only_null)
    audio: dict[str, Any] | None = Field(None, json_schema_extra=_only_null)
    modalities: list[str] | None = Field(None, json_schema_extra=_text_modality)
    prediction: dict[str, Any] | None = Field(None, json_schema_extra=_only_null)
    reasoning_effort: str | None = Field(None, json_schema_extra=_only_null)
    verbosity: str | None = Field(None, json_schema_extra=_only_null)
    web_search_options: dict[str, Any] | None = Field(None, json_schema_extra=_only_null)
    store: bool | None = Field(None, json_schema_extra=_not_stored)
    metadata: dict[str, str] | None = Field(None, json_schema_extra=_only_empty_object)
    service_tier: str | None = Field(None, json_schema_extra=_served_tier)
    prompt_cache_key: str | None = Field(None, json_schema_extra=_only_null)
    prompt_cache_retention: str | None = Field(None, json_schema_extra=_only_null)
    prompt_cache_options: dict[str, Any] | None = Field(None, json_schema_extra=_only_null)
    moderation: Any = Field(None, json_schema_extra=_only_null)
    safety_identifier: str | None = None

    def refusals(self) -> None:
        self.check_stream_options()
        if self.functions is not None or self.function_call is not None:
            _refuse("functions", "the deprecated functions/function_call API; use tools and tool_choice")
        if self.audio is not None:
            _refuse("audio", "text only")
        if self.modalities not in (None, ["text"]):
            _refuse("modalities", "text only")
        if self.prediction is not None:
            _refuse("prediction", "predicted outputs are not served (use speculative: true)")
        if self.reasoning_effort is not None:
            _refuse("reasoning_effort", "the model is not a reasoning model")
        if self.verbosity is not None:
            _refuse("verbosity", "the model has no verbosity control")
        if self.web_search_options is not None:
            _refuse("web_search_options", "no web search")
        if self.store:
            _refuse("store", "completions are not stored")
        if self.metadata:
            _refuse("metadata", "completions are not stored")
        if self.service_tier not in (None, "auto", "default"):
            _refuse("service_tier", "one tier only ('auto'/'default')")
        for name in ("prompt_cache_key", "prompt_cache_retention", "prompt_cache_options"):
            if getattr(self, name) is not None:
                _refuse(name, "the KV-prefix cache keys on the prompt itself")
        if self.moderation is not None:
            _refuse("moderation", "no moderation model")
        if self.top_logprobs is not None and not self.logprobs:
            raise BadRequest("top_logprobs needs logprobs: true", code="invalid_request")
        if self.tool_choice is not None and not self.tools and self.tool_choice != "none":
            raise BadRequest("tool_choice needs tools", code="invalid_request")
        rf = self.response_format
        if self.tools and rf is not None and rf.type != "text" and self.tool_choice != "none":
            _refuse("response_format", "together with tools (the tool call is the structured output)")
        if rf is not None and rf.type == "json_schema" and rf.json_schema is None:
            raise BadRequest("response_format json_schema needs json_schema", code="invalid_request")
        if isinstance(self.tool_choice, NamedToolChoice):
            names = {t.function.name for t in self.tools or ()}
            if self.tool_choice.function.name not in names:
                raise BadRequest(
                    f"tool_choice names {self.tool_choice.function.name!r}, which is not in tools",
                    code="invalid_request",
                )
        if len({t.function.name for t in self.tools or ()}) != len(self.tools or ()):
            raise BadRequest("tool names must be unique", code="invalid_request")

    @property
    def limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def _text_input_schema(schema: dict[str, Any]) -> None:
    """Text or texts: token ids are refused by name (they would be another tokenizer's)."""
    schema.pop("anyOf", None)
    schema["anyOf"] = [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]


class EmbeddingsBody(_Strict):
    input: str | list[str] | list[int] | list[list[int]] = Field(..., json_schema_extra=_text_input_schema)
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    #: the schema names the embedding model's one dimension (``api/openapi.py``)
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None

    def texts(self) -> list[str]:
        x = self.input
        if isinstance(x, str):
            return [x]
        if not x:
            raise BadRequest("input must not be empty", code="empty_input")
        if not all(isinstance(t, str) for t in x):
            _refuse(
                "input",
                "token ids (they would be OpenAI tokenizer ids, not this embedding model's); send text "
                "(LangChain: OpenAIEmbeddings(check_embedding_ctx_length=False))",
            )
        return list(x)  # type: ignore[arg-type]
