"""Request models of the inference routes (``/v1/infer``, ``/v1/embed``, adapters, OpenAI).

Validation lives in these models so a malformed body is refused (422, or 400 where a check is
ours) before any work starts; field names and defaults are the public API (API.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import BadRequest
from ..inference.local import InferRequest

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


class InferBatchBody(BaseModel):
    """Items stay raw JSON here and are validated one by one (``infer_item``), so an error names
    the item (``requests[3]: ...``) and the size limit is the shard's setting (413), not a 422."""

    model_config = ConfigDict(extra="forbid")

    requests: list[dict[str, Any]] = Field(..., min_length=1)
    #: NDJSON stream of ``{"index", ...result}`` lines as items complete (first answers early).
    stream: bool = False
    #: Collective timeout of the scatter-gather (paper: T_scatter = 30 s).
    timeout_s: float = Field(30.0, gt=0, le=600)


# -- /v1/embed ------------------------------------------------------------------------------------


class EmbedBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    texts: list[str] | None = None
    urns: list[str] | None = None


class EmbedUrnsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    urns: list[str] = Field(..., min_length=1, max_length=4096)


# -- /v1/adapters ---------------------------------------------------------------------------------


class AdapterBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    domain: str | None = None
    path: str | None = None
    #: A path on this shard, or an http(s) URL the shard fetches onto its weights volume.
    source: str | None = None
    #: The file's sha256; a mismatch is refused (400 sha256_mismatch).
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")
    scale: float = 1.0
    model: str | None = None
    evaluate: bool | None = None


# -- OpenAI-compatible --------------------------------------------------------------------------


class StreamOptions(BaseModel):
    include_usage: bool = False


class OpenAIBody(BaseModel):
    """What completions and chat completions share."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = 1.0
    top_p: float | None = 1.0
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = 1
    logprobs: Any = None
    # Themis extensions
    adapter: str | None = None
    domain: str | None = None
    priority: int = Field(0, ge=-1000, le=1000)
    #: speculative decoding (same output distribution); None = the shard's default
    speculative: bool | None = None

    def check(self) -> None:
        if self.n != 1:
            raise BadRequest("only n=1 is supported", code="unsupported_parameter")
        if self.logprobs not in (None, False, 0):
            raise BadRequest("logprobs are not supported", code="unsupported_parameter")

    def request(self, prompt: str, max_tokens: int | None) -> InferRequest:
        return InferRequest(
            prompt=prompt,
            model=self.model,
            domain=self.domain,
            adapter=self.adapter,
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            stop=self.stop,
            speculative=self.speculative,
            priority=self.priority,
        )


class CompletionBody(OpenAIBody):
    prompt: str | list[str]
    max_tokens: int | None = 16
    echo: bool = False
    best_of: int | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[dict] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            parts = []
            for p in self.content:
                if p.get("type") != "text":
                    raise BadRequest("only text message parts are supported", code="unsupported_parameter")
                parts.append(str(p.get("text", "")))
            return "".join(parts)
        return self.content or ""


class ChatBody(OpenAIBody):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = None
    tools: list | None = None
