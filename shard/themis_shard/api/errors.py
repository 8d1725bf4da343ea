"""Rendering errors as ``{"error": {"code", "message"}}``: the app's exception handlers.

Every handler maps bad input to a 4xx with a snake_case code; an unexpected exception is
logged and becomes a 500 ``internal`` without leaking a traceback.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic_core import PydanticSerializationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Router
from starlette.types import Scope

from ..errors import ThemisError, error_body, lone_surrogate, surrogate_refusal

log = logging.getLogger(__name__)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(router: Router, scope: Scope) -> list[str]:
    """Every method some route serves at this request's path (a 405's ``Allow``), asked of the
    routes themselves (FastAPI nests included routers, so their methods are not listed flat)."""
    return [
        m
        for m in METHODS
        if any(route.matches({**scope, "method": m})[0] == Match.FULL for route in router.routes)
    ]


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ThemisError)
    async def _themis(_: Request, exc: ThemisError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            code = "malformed_json"
        elif errors and all(e.get("type") == "extra_forbidden" for e in errors):
            code = "unsupported_parameter"  # a field this API does not know, named in the message
        else:
            code = "invalid_request"
        return JSONResponse(error_body(code, _validation_message(exc)), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Starlette names the methods of the first route of the path only
            allow = ", ".join(allowed_methods(request.app.router, request.scope))
            headers = {**(headers or {}), "Allow": allow}
        code = {
            400: "malformed_json",
            404: "not_found",
            405: "method_not_allowed",
            413: "payload_too_large",
        }.get(exc.status_code, "http_error")
        return JSONResponse(
            error_body(code, str(exc.detail)),
            status_code=exc.status_code,
            headers=headers,
        )

    @app.exception_handler(UnicodeEncodeError)
    async def _unicode(request: Request, exc: UnicodeEncodeError) -> JSONResponse:
        # A lone surrogate in any string of the request (a prompt, a key, a bind value) fails
        # wherever it is first encoded as UTF-8: one answer for all of them.
        bad = lone_surrogate(exc)
        if bad is None:
            return await _unexpected(request, exc)
        return JSONResponse(error_body(bad.code, bad.message), status_code=bad.status)

    @app.exception_handler(PydanticSerializationError)
    async def _serialization(request: Request, exc: PydanticSerializationError) -> JSONResponse:
        # Only a request's own text can hold a lone surrogate (nothing stored can): it reached an
        # answer without being encoded on the way.
        if "surrogates not allowed" not in str(exc):
            return await _unexpected(request, exc)
        bad = surrogate_refusal()
        return JSONResponse(error_body(bad.code, bad.message), status_code=bad.status)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        # Starlette re-raises after this response and uvicorn then drops the connection: say so,
        # so a keep-alive client opens a new one instead of failing its next request.
        return JSONResponse(
            error_body("internal", "internal error"), status_code=500, headers={"Connection": "close"}
        )
