"""Typed exceptions for the API's standard error shape ``{"error": {"code", "message"}}``.

One class per status a caller handles differently; the server's ``code`` is kept on every
exception, so a caller can tell ``document_not_found`` from ``collection_not_found`` without
parsing messages.
"""

from __future__ import annotations

from typing import Any


class ThemisError(Exception):
    """Any refusal from a shard (``status`` is the HTTP status, 0 when nothing was answered)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        #: The refused request as ``"METHOD /path"`` (set by the client; "" when not known).
        self.request = ""


class ThemisConnectionError(ThemisError):
    """No shard answered: ``unreachable`` (no connection after every retry) or ``connection_lost``
    (the connection broke before the answer; the request may or may not have been applied)."""


class BadRequest(ThemisError):
    """400 / 422: the request is malformed; fix the request, do not retry it."""


class Unauthorized(ThemisError):
    """401: no valid API key."""


class Forbidden(ThemisError):
    """403: the key's role may not do this."""


class NotFound(ThemisError):
    """404: the document, collection or route does not exist."""


class Conflict(ThemisError):
    """409 other than a version conflict (e.g. an adapter being unloaded)."""


class VersionConflict(Conflict):
    """409 ``version_conflict``: ``If-Match`` / ``if_version`` did not match; nothing was applied."""


class PayloadTooLarge(ThemisError):
    """413: the body (or a batch) is over the shard's limit."""


class RateLimited(ThemisError):
    """429: the shard is shedding load; retried automatically for idempotent calls."""


class Unavailable(ThemisError):
    """503: the shard (or the owners of a key) cannot serve now; retried for idempotent calls."""


class ServerError(ThemisError):
    """Any other 5xx."""


_BY_STATUS: dict[int, type[ThemisError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: BadRequest,
    429: RateLimited,
    503: Unavailable,
}


def error_from_response(status: int, body: Any, text: str = "") -> ThemisError:
    """The typed exception for a non-2xx answer; a body not in the standard shape (a proxy's
    HTML page, say) still gives the right class, with ``code`` ``http_<status>``."""
    code, message = f"http_{status}", text[:500] or f"HTTP {status}"
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code") or code)
        message = str(body["error"].get("message") or message)
    elif isinstance(body, dict) and "detail" in body:
        message = str(body["detail"])
    if status == 409 and code == "version_conflict":
        return VersionConflict(status, code, message)
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ThemisError)
    return cls(status, code, message)
