"""Errors every layer raises: one exception type with an HTTP status and a stable code.

Pure Python, so storage, vectors, the engine and the cluster can raise them without importing a
web framework; ``api/errors.py`` renders them as ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations


class ThemisError(Exception):
    """An error with an HTTP status and a stable machine-readable code."""

    status = 400
    code = "bad_request"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if status:
            self.status = status
        self.headers = headers or {}


class BadRequest(ThemisError):
    status, code = 400, "bad_request"


class NotFound(ThemisError):
    status, code = 404, "not_found"


class Conflict(ThemisError):
    status, code = 409, "conflict"


class PayloadTooLarge(ThemisError):
    status, code = 413, "payload_too_large"


class Unavailable(ThemisError):
    status, code = 503, "unavailable"


class InsufficientStorage(ThemisError):
    """The shard's disk cannot take the write (full, or failing): nothing was written."""

    status, code = 507, "insufficient_storage"


def lone_surrogate(exc: UnicodeEncodeError) -> BadRequest | None:
    """The 400 for text holding a lone UTF-16 surrogate (JSON's ``"\\ud800"`` decodes to one, but
    it is not Unicode, so it cannot be stored, tokenized or sent on); None for any other error."""
    if exc.reason != "surrogates not allowed":
        return None
    bad = exc.object[exc.start : exc.end] if isinstance(exc.object, str) else ""
    return surrogate_refusal("".join(f"\\u{ord(c):04x}" for c in bad[:4]))


def surrogate_refusal(shown: str = "") -> BadRequest:
    return BadRequest(
        f"the request holds a lone UTF-16 surrogate{f' ({shown})' if shown else ''} in a string; text "
        "must be valid Unicode: a high surrogate (\\ud800-\\udbff) is valid only directly followed "
        "by a low one (\\udc00-\\udfff)",
        code="invalid_unicode",
    )


def check_unicode(value: object) -> None:
    """400 ``invalid_unicode`` when a string (or an object key) anywhere in a JSON value holds a
    lone surrogate: for values that are used before anything encodes them (AQL's text and binds)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode()
            except UnicodeEncodeError as exc:
                raise lone_surrogate(exc) or BadRequest(str(exc), code="invalid_unicode") from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def error_body(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def llm_disabled(shard_id: str) -> Unavailable:
    """The 503 of a shard started without a model, on every path to its engine (routes and AQL)."""
    who = f"shard {shard_id}" if shard_id else "this shard"
    return Unavailable(
        f"{who} runs without a model (started with themis up --no-llm, i.e. THEMIS_LLM_ENABLED=false), "
        "so it serves no inference, embeddings, RAG or adapters; start the cluster without --no-llm",
        code="llm_disabled",
    )
