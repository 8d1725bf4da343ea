"""Spec: with the [otel] extra, OpenTelemetry spans per request and per shard hop, joined to the
W3C traceparent the shards propagate; without it (or unconfigured) nothing changes."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn
from fastapi.testclient import TestClient
from themis_core.tracing import NoSpans
from themis_shard.app import create_app
from themis_shard.llm.settings import LLMSettings
from themis_shard.otel import OtelSettings, build_spans, wanted
from themis_shard.settings import Settings
from themis_testing.ports import free_port as _free_port

CALLER_TRACE, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


# ---- when tracing is on -------------------------------------------------------------------------
def test_tracing_is_off_unless_configured():
    assert wanted(OtelSettings(), {}, installed=True) is False
    assert isinstance(build_spans(OtelSettings(), "shard-0", env={}), NoSpans)


def test_an_otlp_endpoint_turns_it_on_where_the_extra_is_installed():
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert wanted(OtelSettings(), env, installed=True) is True
    assert wanted(OtelSettings(), {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c/v1/traces"}, True) is True
    assert wanted(OtelSettings(enabled=False), env, installed=True) is False


def test_an_endpoint_without_the_extra_changes_nothing_but_a_warning(caplog):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert wanted(OtelSettings(), env, installed=False) is False
    assert "pip install 'themisdb[otel]'" in caplog.text


def test_asking_for_it_without_the_extra_names_the_extra():
    with pytest.raises(RuntimeError, match=r"pip install 'themisdb\[otel\]'"):
        wanted(OtelSettings(enabled=True), {}, installed=False)


def shard_script(tmp_path: Path, before: str, with_client: str) -> str:
    """A Python program for a fresh interpreter: ``before``, then a shard app without a model
    served to ``with_client``'s lines as ``c`` (a TestClient)."""
    body = "".join(f"    {line}\n" for line in with_client.splitlines())
    return (
        before + "from fastapi.testclient import TestClient\n"
        "from themis_shard.app import create_app\n"
        "from themis_shard.llm.settings import LLMSettings\n"
        "from themis_shard.settings import Settings\n"
        f"s = Settings(data_dir={str(tmp_path / 'd')!r}, llm=LLMSettings(enabled=False))\n"
        "with TestClient(create_app(s)) as c:\n" + body
    )


def test_a_shard_without_the_extra_serves_as_before_even_with_an_endpoint_set(tmp_path):
    code = shard_script(
        tmp_path,
        # the extra is the SDK and the exporter (this FastAPI already needs opentelemetry-api)
        "import sys\nfor m in ('opentelemetry.sdk', 'opentelemetry.exporter'): sys.modules[m] = None\n",
        "r = c.put('/v1/collections/b/documents/k', json={'t': 1})\n"
        "print(r.status_code, 'traceresponse' in r.headers)\n",
    )
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "PATH": "/usr/bin:/bin"}
    env.update({k: v for k, v in __import__("os").environ.items() if k in ("PYTHONPATH", "HOME")})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["200", "True"]


def test_a_global_opentelemetry_provider_does_not_make_the_framework_trace_requests_again(tmp_path):
    """The shard traces itself, on its own provider; a process-wide provider (set by an
    auto-instrumentation agent, say) must not add the web framework's spans to every request."""
    pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra: pip install 'themisdb[otel]'")
    code = shard_script(
        tmp_path,
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter\n"
        "exported = InMemorySpanExporter()\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(exported))\n"
        "trace.set_tracer_provider(provider)\n",
        "codes = [c.put('/v1/collections/b/documents/k', json={'t': 1}).status_code,\n"
        "         c.get('/v1/collections').status_code]\n"
        "print(codes, len(exported.get_finished_spans()))\n",
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[200, 200] 0"


# ---- spans across a forwarded request -----------------------------------------------------------
@pytest.fixture
def recorded():
    """Each shard's own OpenTelemetry provider, recording into memory."""
    pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra: pip install 'themisdb[otel]'")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from themis_shard.otel_sdk import OtelSpans

    exporter = InMemorySpanExporter()

    def spans_for(shard_id: str) -> OtelSpans:
        return OtelSpans.exporting(
            SimpleSpanProcessor(exporter), service_name="themis-shard", shard_id=shard_id
        )

    return spans_for, exporter


def test_a_forwarded_request_is_one_trace_of_parent_and_child_spans(tmp_path: Path, recorded, caplog):
    """Two real shards of one plan (shard-0 in-process, shard-1 on uvicorn): a read on shard-0 of
    a key shard-1 owns. shard-0's SERVER span continues the caller's traceparent, its CLIENT span
    for the hop is the SERVER span's child, and shard-1's SERVER span is the CLIENT span's child."""
    from opentelemetry.trace import SpanKind
    from themis_core.plan import ClusterSpec, Member, build_plan
    from themis_shard.cluster.placement.owners import Topology

    spans_for, exporter = recorded
    caplog.set_level(logging.INFO, logger="themis.access")
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

    peer_app = create_app(shard("shard-1"), spans=spans_for("shard-1"))
    server = uvicorn.Server(uvicorn.Config(peer_app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        with TestClient(create_app(shard("shard-0"), spans=spans_for("shard-0"))) as entry:
            exporter.clear()  # start-up's own calls (peer probes) are not this request's
            r = entry.get(f"/v1/collections/books/documents/{key}", headers={"traceparent": CALLER})
            assert r.status_code == 404
    finally:
        server.should_exit = True
        thread.join(10)

    finished = exporter.get_finished_spans()
    by_shard = lambda sid, kind: [  # noqa: E731
        s for s in finished if s.resource.attributes["service.instance.id"] == sid and s.kind is kind
    ]
    (entry_span,) = [s for s in by_shard("shard-0", SpanKind.SERVER) if key in s.attributes["url.path"]]
    assert entry_span.name == "GET /v1/collections/{collection}/documents/{key}"
    assert entry_span.attributes["http.response.status_code"] == 404
    assert entry_span.parent.span_id == int(CALLER_SPAN, 16) and entry_span.parent.is_remote
    hops = [s for s in by_shard("shard-0", SpanKind.CLIENT) if s.parent.span_id == entry_span.context.span_id]
    assert hops and all(h.attributes["themis.peer"] == "shard-1" for h in hops)
    served = by_shard("shard-1", SpanKind.SERVER)
    children = [s for s in served if s.parent and s.parent.span_id in {h.context.span_id for h in hops}]
    assert children and all(s.attributes["url.path"].startswith("/internal/") for s in children)
    trace_ids = {s.context.trace_id for s in (entry_span, *hops, *children)}
    assert trace_ids == {int(CALLER_TRACE, 16)}
    # the access log names the very span that was exported
    (logged,) = [
        rec
        for rec in caplog.records
        if rec.name == "themis.access" and rec.path == f"/v1/collections/books/documents/{key}"
    ]
    assert logged.span_id == format(entry_span.context.span_id, "016x") and logged.trace_id == CALLER_TRACE
