"""Shard status probing: the shape of /v1/cluster/status, tolerance of failures, TLS with the CA."""

import contextlib
import json
import os
import random
import socket
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from themis_core.certificates import generate_ca, issue_shard_cert
from themis_operator.probe import ShardProber, adapter_states, parse_status, reports_from_status


def test_parse_status_reads_ring_version_migration_and_own_member_state():
    payload = {
        "shard_id": "demo-1",
        "ring_version": 4,
        "members": [{"shard_id": "demo-0", "state": "up"}, {"shard_id": "demo-1", "state": "joining"}],
        "migration": {"state": "migrating", "ring_version": 4, "keys_received": 10},
        "plan_adapters": {"loaded": ["legal"], "failed": {"medical": "sha256 mismatch"}},
    }
    report = parse_status("demo-1", "https://x", "member", payload)
    assert (report.reachable, report.state, report.ringVersion, report.migration) == (
        True,
        "joining",
        4,
        "migrating",
    )
    assert report.migrationRingVersion == 4
    states = adapter_states([report])
    assert [(sid, e.state, e.message) for sid, e in states["legal"] + states["medical"]] == [
        ("demo-1", "loaded", ""),
        ("demo-1", "failed", "sha256 mismatch"),
    ]


@pytest.fixture
def real_shards(tmp_path):
    """Real shard processes (no model) for demo-0 and demo-2, on loopback addresses 127.A.B.index
    and one port, so that one URL template reaches each; nothing runs for demo-1."""
    subnet = f"127.{random.randint(64, 250)}.{random.randint(1, 254)}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for index in (0, 2):
        env = {
            **os.environ,
            "THEMIS_SHARD_ID": f"demo-{index}",
            "THEMIS_HOST": f"{subnet}.{index}",
            "THEMIS_PORT": str(port),
            "THEMIS_DATA_DIR": str(tmp_path / f"demo-{index}"),
            "THEMIS_LLM_ENABLED": "false",
        }
        log = (tmp_path / f"demo-{index}.log").open("wb")
        procs.append(
            subprocess.Popen([sys.executable, "-m", "themis_shard"], env=env, stdout=log, stderr=log)
        )
    try:
        for index in (0, 2):
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://{subnet}.{index}:{port}/ready", timeout=1).status_code == 200:
                        break
                assert time.monotonic() < deadline, (tmp_path / f"demo-{index}.log").read_text()[-2000:]
                time.sleep(0.2)
        yield f"http://{subnet}.{{index}}:{port}"
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.e2e
def test_probe_reports_unreachable_shards_instead_of_raising(real_shards):
    prober = ShardProber(timeout_s=1.0, url_template=real_shards)
    reports = prober.probe("demo", "ns", count=3, members=2, tls=False)
    assert [(r.id, r.reachable, r.role) for r in reports] == [
        ("demo-0", True, "member"),
        ("demo-1", False, "member"),  # nothing listens there
        ("demo-2", True, "leaving"),
    ]
    assert reports[0].ringVersion == reports[2].ringVersion
    assert reports[2].migration != "unknown"  # what the real shard says about its hand-off
    nowhere = ShardProber(timeout_s=0.2).probe("demo", "ns", count=1, members=1, tls=True)
    assert nowhere[0].reachable is False and nowhere[0].url == "https://demo-0.demo-headless.ns.svc:8080"


def test_reports_survive_a_round_trip_through_the_status():
    report = parse_status("demo-0", "u", "member", {"ring_version": 2, "migration": {"state": "drained"}})
    again = reports_from_status({"shards": [report.summary(), {"garbage": True}]})
    assert again["demo-0"].migration == "drained" and again["demo-0"].ringVersion == 2


def test_https_probes_verify_the_shard_certificate_against_the_cluster_ca(tmp_path):
    ca = generate_ca("demo")
    cert, key = issue_shard_cert(*ca, "demo-0", ["localhost"], ["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(
                {"shard_id": "demo-0", "ring_version": 1, "migration": {"state": "idle"}}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        prober = ShardProber(timeout_s=2, url_template=f"https://127.0.0.1:{server.server_address[1]}")
        (trusted,) = prober.probe("demo", "ns", count=1, members=1, tls=True, ca_pem=ca[0])
        assert trusted.reachable and trusted.ringVersion == 1
        (foreign,) = prober.probe("demo", "ns", count=1, members=1, tls=True, ca_pem=generate_ca("x")[0])
        assert foreign.reachable is False
    finally:
        server.shutdown()
        server.server_close()


def test_gossiped_capabilities_tell_where_an_adapter_is_loaded():
    """Every shard repeats the cluster's announcements; they are counted once per shard."""
    caps = [
        {
            "shard_id": "demo-0",
            "adapter_id": "legal",
            "domain": "legal",
            "accuracy_delta": 0.07,
            "performance_delta_p99_ms": 15.0,
            "active": True,
        },
        {
            "shard_id": "demo-2",
            "adapter_id": "legal",
            "domain": "legal",
            "accuracy_delta": 0.05,
            "performance_delta_p99_ms": 9.0,
            "active": True,
        },
    ]
    reports = [parse_status(f"demo-{i}", "u", "member", {"capabilities": caps}) for i in range(3)]
    states = adapter_states(reports)
    assert [shard for shard, _ in states["legal"]] == ["demo-0", "demo-2"]
    assert states["legal"][0][1].state == "loaded" and states["legal"][1][1].p99_delta_ms == 9.0
