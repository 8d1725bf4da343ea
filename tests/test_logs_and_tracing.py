"""Spec: request ids (W3C traceparent) on every log line and every shard-to-shard hop; access
logs with route, status and latency, at INFO for the failed and the slow requests (or for every
one when asked); text or JSON log lines (THEMIS_LOG_FORMAT)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from themis_core.logs import AccessLogSettings, LogSettings, TraceFilter, configure_logging, formatter
from themis_core.tracing import (
    TraceContext,
    current_trace,
    new_trace,
    outgoing_traceparent,
    parse_traceparent,
    server_span,
)
from themis_shard.api.access_log import level_of
from themis_shard.app import create_app
from themis_shard.cluster.settings import ClusterSettings
from themis_shard.cluster.transport.remote import RemoteExecutor
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings
from themis_testing.ports import free_port as _free_port

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_traceparent_parsing_follows_the_w3c_rules() -> None:
    ctx = parse_traceparent(CALLER)
    assert ctx == TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "01")
    assert ctx.header() == CALLER
    for bad in (
        None,
        "",
        "garbage",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is invalid
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero span id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # v00 has no more fields
    ):
        assert parse_traceparent(bad) is None, bad
    future = parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra")
    assert future is not None and future.trace_id == ctx.trace_id


def test_a_server_span_continues_the_callers_trace_or_starts_one() -> None:
    span = server_span(CALLER)
    assert span.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736" and span.parent_id == "00f067aa0ba902b7"
    assert span.span_id != "00f067aa0ba902b7"
    fresh = server_span("not a traceparent")
    assert fresh.parent_id is None and len(fresh.trace_id) == 32 and fresh.trace_id != span.trace_id
    assert outgoing_traceparent() is None  # outside a request nothing is sent


@pytest.fixture
def app_client(tmp_path: Path):
    settings = Settings(data_dir=tmp_path / "shard", llm=LLMSettings(enabled=False))
    with TestClient(create_app(settings)) as c:
        yield c


def test_each_request_is_access_logged_with_route_status_latency_and_trace(app_client, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="themis.access")
    r = app_client.put("/v1/collections/books/documents/dune", json={"t": 1}, headers={"traceparent": CALLER})
    assert r.status_code == 200
    served = parse_traceparent(r.headers["traceresponse"])
    assert served is not None and served.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    app_client.get("/v1/collections/books/documents/nope")
    app_client.get("/health")
    lines = [rec for rec in caplog.records if rec.name == "themis.access"]
    put, missing, health = lines[-3:]
    assert (put.method, put.route, put.status) == ("PUT", "/v1/collections/{collection}/documents/{key}", 200)
    assert put.latency_ms > 0 and put.parent_span_id == "00f067aa0ba902b7"
    assert "PUT /v1/collections/{collection}/documents/{key} 200" in put.getMessage()
    assert missing.status == 404 and missing.path == "/v1/collections/books/documents/nope"
    # a fast success stays out of the INFO log, a failure is in it, and so are no probes
    assert (put.levelno, missing.levelno, health.levelno) == (logging.DEBUG, logging.INFO, logging.DEBUG)


def test_the_info_log_has_the_failed_and_the_slow_requests_or_every_one_when_asked() -> None:
    default = AccessLogSettings()
    assert default.every_request is False and default.slow_ms == 1000
    doc = "/v1/collections/books/documents/dune"
    assert level_of(doc, 200, 3.0, default) == logging.DEBUG
    assert level_of(doc, 409, 3.0, default) == logging.INFO
    assert level_of(doc, 503, 3.0, default) == logging.INFO
    assert level_of(doc, 200, 1000.0, default) == logging.INFO
    every = AccessLogSettings(every_request=True)
    assert level_of(doc, 200, 3.0, every) == logging.INFO
    for quiet in ("/health", "/ready", "/metrics", "/internal/commit"):  # never above DEBUG
        assert level_of(quiet, 503, 5000.0, every) == logging.DEBUG


def test_every_request_is_at_info_when_the_setting_asks(tmp_path: Path, caplog, monkeypatch) -> None:
    monkeypatch.setenv("THEMIS_ACCESS_LOG_EVERY_REQUEST", "true")
    settings = Settings(data_dir=tmp_path / "shard", llm=LLMSettings(enabled=False))
    assert settings.access_log.every_request is True
    caplog.set_level(logging.INFO, logger="themis.access")
    with TestClient(create_app(settings)) as c:
        assert c.put("/v1/collections/books/documents/dune", json={"t": 1}).status_code == 200
    (put,) = [rec for rec in caplog.records if rec.name == "themis.access" and rec.method == "PUT"]
    assert put.levelno == logging.INFO and put.status == 200


def test_json_lines_carry_the_trace_and_the_access_fields() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter("json"))
    handler.addFilter(TraceFilter())
    log = logging.getLogger("themis.test.json")
    log.addHandler(handler)
    log.propagate = False
    try:
        token = current_trace.set(parse_traceparent(CALLER))
        log.warning("moved %d keys", 3, extra={"route": "/v1/x", "status": 200})
        current_trace.reset(token)
        log.warning("outside")
    finally:
        log.removeHandler(handler)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["message"] == "moved 3 keys" and first["level"] == "WARNING"
    assert first["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" and first["route"] == "/v1/x"
    assert first["logger"] == "themis.test.json" and "time" in first
    assert second["trace_id"] == "-"


def test_log_format_is_chosen_by_env_and_text_lines_show_the_trace(monkeypatch) -> None:
    monkeypatch.setenv("THEMIS_LOG_FORMAT", "json")
    assert LogSettings().format == "json"
    monkeypatch.setenv("THEMIS_LOG_FORMAT", "xml")
    with pytest.raises(ValueError):
        LogSettings()
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    out = io.StringIO()
    try:
        configure_logging("info", "text", stream=out)
        token = current_trace.set(parse_traceparent(CALLER))
        logging.getLogger("themis.test.text").info("hello")
        current_trace.reset(token)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert "[4bf92f3577b34da6a3ce929d0e0e4736]: hello" in out.getvalue()


def test_the_peer_client_carries_the_trace_to_the_next_shard(tmp_path: Path, caplog) -> None:
    """A real second shard on uvicorn; the cluster's peer client calls it inside a request."""
    caplog.set_level(logging.DEBUG, logger="themis.access")
    port = _free_port()
    app = create_app(Settings(data_dir=tmp_path / "peer", shard_id="shard-1", llm=LLMSettings(enabled=False)))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    request_span = new_trace()

    async def hop() -> None:
        async with RemoteExecutor(ClusterSettings(), lambda _sid: f"http://127.0.0.1:{port}") as peers:
            token = current_trace.set(request_span)
            try:
                await peers.get_json("shard-1", "/v1/cluster/status")
            finally:
                current_trace.reset(token)
            await peers.get_json("shard-1", "/v1/collections")  # outside any request: a new trace

    try:
        asyncio.run(hop())
    finally:
        server.should_exit = True
        thread.join(10)
    by_route = {rec.route: rec for rec in caplog.records if rec.name == "themis.access"}
    traced = by_route["/v1/cluster/status"]
    assert traced.trace_id == request_span.trace_id and traced.parent_span_id not in (
        None,
        request_span.span_id,
    )
    untraced = by_route["/v1/collections"]
    assert untraced.trace_id != request_span.trace_id and untraced.parent_span_id is None


def test_a_forwarded_document_read_carries_the_callers_trace_to_the_owner(tmp_path: Path, caplog) -> None:
    """Two real shards of one plan: shard-0 in-process, shard-1 on uvicorn. A read on shard-0 of a
    key that shard-1 owns is forwarded by the cluster's routing; shard-1 logs the same trace."""
    from themis_core.plan import ClusterSpec, Member, build_plan
    from themis_shard.cluster.placement.owners import Topology

    caplog.set_level(logging.DEBUG, logger="themis.access")  # shard-to-shard hops log at DEBUG
    port = _free_port()
    plan = build_plan(
        ClusterSpec(
            name="t",
            members=(
                Member(shard_id="shard-0", url=f"http://127.0.0.1:{_free_port()}"),
                Member(shard_id="shard-1", url=f"http://127.0.0.1:{port}"),
            ),
            raid_mode="raid0",
        )
    )
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(plan.to_json())
    topo = Topology.of(plan, "shard-0")
    key = next(f"k{i}" for i in range(100) if topo.owners("books", f"k{i}") == ["shard-1"])

    def shard(sid: str) -> Settings:
        return Settings(
            data_dir=tmp_path / sid, shard_id=sid, plan_path=plan_path, llm=LLMSettings(enabled=False)
        )

    server = uvicorn.Server(
        uvicorn.Config(create_app(shard("shard-1")), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with TestClient(create_app(shard("shard-0"))) as entry:
            r = entry.get(f"/v1/collections/books/documents/{key}", headers={"traceparent": CALLER})
            assert r.status_code == 404 and r.json()["error"]["code"] == "document_not_found"
    finally:
        server.should_exit = True
        thread.join(10)
    hops = [rec for rec in caplog.records if rec.name == "themis.access" and key in rec.path]
    assert {rec.trace_id for rec in hops} == {"4bf92f3577b34da6a3ce929d0e0e4736"}
    assert any(rec.path.startswith("/internal/") for rec in hops), [rec.path for rec in hops]
    internal = [rec for rec in hops if rec.path.startswith("/internal/")]
    # each hop is a child span: it arrived with a traceparent, under a span of its own
    assert all(rec.parent_span_id is not None and rec.span_id != rec.parent_span_id for rec in internal)
