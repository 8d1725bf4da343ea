"""Optional OpenTelemetry tracing (the [otel] extra): whether it is on, and the shard's ``Spans``.

On when ``THEMIS_OTEL_ENABLED=true``, or when left unset and the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (the exporter reads
those itself). Asked for explicitly without the extra, the shard refuses to start naming it; a
bare endpoint without the extra is logged and ignored, so nothing changes for a shard without it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Mapping

from pydantic_settings import BaseSettings, SettingsConfigDict
from themis_core.tracing import NoSpans, Spans

log = logging.getLogger(__name__)
OTEL_HINT = "pip install 'themisdb[otel]'"
OTEL_MODULES = ("opentelemetry.trace", "opentelemetry.sdk")
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class OtelSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_OTEL_", extra="ignore")

    #: None: on when an OTLP endpoint variable is set and the extra is installed.
    enabled: bool | None = None
    #: ``service.name`` of the exported spans (``service.instance.id`` is the shard id).
    service_name: str = "themis-shard"


def otel_installed() -> bool:
    try:
        return all(importlib.util.find_spec(m) is not None for m in OTEL_MODULES)
    except (ImportError, ValueError):  # a parent package missing, or blocked
        return False


def wanted(settings: OtelSettings, env: Mapping[str, str], installed: bool) -> bool:
    """Whether to export spans; raises when asked for explicitly without the extra."""
    if settings.enabled is False:
        return False
    if settings.enabled and not installed:
        raise RuntimeError(f"THEMIS_OTEL_ENABLED=true needs OpenTelemetry: {OTEL_HINT}")
    if settings.enabled:
        return True
    endpoint = next((name for name in ENDPOINT_VARIABLES if env.get(name)), None)
    if endpoint and not installed:
        log.warning("%s is set but OpenTelemetry is not installed (%s): no spans", endpoint, OTEL_HINT)
    return bool(endpoint) and installed


def build_spans(settings: OtelSettings, shard_id: str, env: Mapping[str, str] | None = None) -> Spans:
    """``NoSpans`` unless tracing is wanted; then OpenTelemetry spans exported over OTLP/HTTP."""
    if not wanted(settings, os.environ if env is None else env, otel_installed()):
        return NoSpans()
    from .otel_sdk import OtelSpans, otlp_processor

    return OtelSpans.exporting(otlp_processor(), service_name=settings.service_name, shard_id=shard_id)
