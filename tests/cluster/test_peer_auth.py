"""Spec: /internal/... answers only requests signed with the cluster secret (without mTLS):
unsigned, forged, altered, stale and replayed requests are refused with 401."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient
from themis_shard.app import create_app
from themis_shard.cluster.security.peer_auth import (
    NONCE,
    SIGNATURE,
    TIMESTAMP,
    NonceWindow,
    PeerAuth,
    signed_headers,
    verify,
)

SECRET = b"s3cret"


def check(headers, body=b"{}", now=1000.0, target="/internal/replicate", nonces=None) -> str | None:
    return verify(SECRET, headers, "POST", target, body, now, 30, nonces or NonceWindow(30))


def test_a_signed_request_passes_once_and_any_change_is_refused() -> None:
    headers = signed_headers(SECRET, "s-0", "POST", "/internal/replicate", b"{}", 1000.0)
    nonces = NonceWindow(30)
    assert check(headers, nonces=nonces) is None
    assert check(headers, nonces=nonces) == "replayed request"
    assert check(headers, body=b'{"x":1}') == "bad signature"  # altered body
    assert check(headers, target="/internal/commit") == "bad signature"  # another endpoint
    assert check({**headers, SIGNATURE: "0" * 64}) == "bad signature"
    assert "ago" in check(headers, now=1000.0 + 31)  # stale
    assert check({k: v for k, v in headers.items() if k != NONCE}) == "unsigned shard-to-shard request"
    assert check({**headers, TIMESTAMP: "soon"}) == "malformed timestamp"
    assert signed_headers(SECRET, "s-0", "POST", "/x", b"", 1.0)[NONCE] != headers[NONCE]  # retries differ


def test_the_nonce_window_forgets_what_is_older_than_its_age() -> None:
    window = NonceWindow(10)
    assert window.first_time("a", 0) and not window.first_time("a", 5)
    assert window.first_time("a", 11)  # outside the window: a stale timestamp is refused anyway


@pytest.fixture
def secured(tmp_path, monkeypatch, make_settings):
    monkeypatch.setenv("THEMIS_CLUSTER_GOSSIP_SECRET", "cluster-secret")
    with TestClient(create_app(make_settings(tmp_path / "shard"))) as client:
        yield client


def test_internal_routes_refuse_unsigned_calls_and_serve_signed_ones(secured: TestClient) -> None:
    r = secured.get("/internal/collections")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    r = secured.get("/internal/collections", auth=PeerAuth("another-secret", "intruder"))
    assert r.status_code == 401
    assert secured.get("/internal/collections", auth=PeerAuth("cluster-secret", "s-1")).status_code == 200
    body = {"items": [{"collection": "c", "key": "k", "version": 1, "document": {"a": 1}}]}
    r = secured.post("/internal/replicate", json=body, auth=PeerAuth("cluster-secret", "s-1"))
    assert r.status_code == 200 and r.json() == {"applied": 1}
    assert secured.get("/v1/collections").status_code == 200  # the public API is not affected


def test_the_signer_covers_the_query_string() -> None:
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.update(request.headers)
        return httpx.Response(200)

    with httpx.Client(transport=httpx.MockTransport(handler), auth=PeerAuth("k", "s-0")) as c:
        c.get("http://peer/internal/documents/c/k", params={"tombstones": "true"})
    target = "/internal/documents/c/k?tombstones=true"
    assert verify(b"k", seen, "GET", target, b"", float(seen[TIMESTAMP]), 30, NonceWindow(30)) is None


@pytest.mark.parametrize(
    "route", ["prepare", "replica", "commit", "abort", "accept", "status", "fence", "settle", "list"]
)
def test_two_phase_commit_routes_are_the_clusters_own(secured: TestClient, route: str) -> None:
    r = secured.request("GET" if route == "list" else "POST", f"/internal/txn/{route}", json={"txn": "t1"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"


def test_a_signed_fence_of_an_unknown_transaction_is_a_promise_never_to_accept_its_commit(
    secured: TestClient,
) -> None:
    peer = PeerAuth("cluster-secret", "s-1")
    r = secured.post("/internal/txn/fence", json={"txn": "t1"}, auth=peer)
    assert r.status_code == 200 and r.json() == {"decision": "fenced", "running": False, "prepared": False}
    r = secured.post("/internal/txn/accept", json={"txn": "t1", "participants": ["s-1"]}, auth=peer)
    assert r.status_code == 200 and r.json() == {"decision": "fenced"}  # a late COMMIT loses


def test_age_limit_and_clock_skew_are_separate_settings_far_above_request_timeouts() -> None:
    from themis_shard.cluster.settings import ClusterSettings

    s = ClusterSettings()
    assert s.internal_signature_max_age_s > s.request_timeout_s  # a peer paused past a timeout
    headers = signed_headers(SECRET, "s-0", "POST", "/internal/replicate", b"{}", 1000.0)

    def at(now: float, max_age: float = 300, skew: float = 30) -> str | None:
        target = "/internal/replicate"
        return verify(SECRET, headers, "POST", target, b"{}", now, max_age, NonceWindow(400), skew)

    assert at(1000.0 + 60) is None  # read a minute late (the receiver was paused)
    assert at(1000.0 + 329) is None  # the age limit plus the skew allowance
    assert "ago" in at(1000.0 + 331)
    assert at(1000.0 - 29) is None  # the sender's clock is ahead, within the skew
    assert "in the future" in at(1000.0 - 31)
    assert "in the future" in at(1000.0 - 1, skew=0)
