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


def error_body(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}
