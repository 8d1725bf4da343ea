"""Process logging: text or JSON lines (``THEMIS_LOG_FORMAT``), each with the request's trace id.

Used by the shard and the operator entry points alike; uvicorn's loggers propagate here (its
own access log is replaced by ``api.access_log``), so every line has one format.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .tracing import current_trace

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(trace_id)s]: %(message)s"


class LogSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_LOG_", extra="ignore")

    #: ``text`` for people at a terminal, ``json`` (one object per line) for log collectors.
    format: Literal["text", "json"] = "text"
    #: The shard's level (``themis-shard --log-level`` wins over it).
    level: Literal["debug", "info", "warning", "error", "critical"] = "info"


class AccessLogSettings(BaseSettings):
    """Which access lines a shard writes at INFO (``api/access_log.py``: the failed and the slow)."""

    model_config = SettingsConfigDict(env_prefix="THEMIS_ACCESS_LOG_", extra="ignore")

    #: Every client request at INFO, not only the failed and the slow.
    every_request: bool = False
    #: A client request that took this long is logged at INFO whatever its status.
    slow_ms: float = Field(default=1000.0, ge=0)


class TraceFilter(logging.Filter):
    """Adds ``trace_id`` / ``span_id`` of the current request ("-" outside one) to each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = current_trace.get()
        if not hasattr(record, "trace_id"):
            record.trace_id = ctx.trace_id if ctx is not None else "-"
        if not hasattr(record, "span_id"):
            record.span_id = ctx.span_id if ctx is not None else "-"
        return True


def formatter(fmt: Literal["text", "json"]) -> logging.Formatter:
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        return JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s %(trace_id)s %(span_id)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    return logging.Formatter(TEXT_FORMAT)


def configure_logging(level: str | int, fmt: Literal["text", "json"] = "text", stream=None) -> None:
    """One handler on the root logger (replacing any earlier one) with the trace filter."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(fmt))
    handler.addFilter(TraceFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
