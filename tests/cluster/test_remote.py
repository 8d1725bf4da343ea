"""RemoteExecutor against real local peers: retries, timeouts, garbage, typed errors, breaker, mTLS."""

from __future__ import annotations

import asyncio
import ssl
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from themis_shard.cluster.settings import ClusterSettings
from themis_shard.cluster.transport.remote import PeerError, PeerUnavailable, RemoteExecutor

from .peers import dead_url, junk_tcp_server, running


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def server():
    with running() as s:
        yield s


def make(
    urls: dict[str, str], *, clock=None, **settings
) -> tuple[RemoteExecutor, list[float], CollectorRegistry]:
    sleeps: list[float] = []

    async def no_sleep(s: float) -> None:
        sleeps.append(s)

    reg = CollectorRegistry()
    kw = {"clock": clock} if clock else {}
    ex = RemoteExecutor(ClusterSettings(**settings), urls.__getitem__, registry=reg, sleep=no_sleep, **kw)
    return ex, sleeps, reg


def run(coro_fn):
    """Run ``coro_fn(executor...)`` and close executors it created (helper keeps tests flat)."""
    return asyncio.run(coro_fn())


def test_a_healthy_peer_answers_json_over_pooled_connections(server):
    async def go():
        ex, _, reg = make({"a": server.url()})
        async with ex:
            first = await ex.get_json("a", "/ok")
            second = await ex.get_json("a", "/ok")
        return first, second, reg

    first, second, reg = run(go)
    assert first["ok"] is True
    assert first["client_port"] == second["client_port"]  # keep-alive: the same connection
    assert reg.get_sample_value("themis_remote_requests_total", {"peer": "a", "outcome": "ok"}) == 2


def test_idempotent_calls_are_retried_three_times_with_jittered_exponential_backoff(server):
    async def go():
        ex, sleeps, reg = make({"a": server.url()})
        async with ex:
            body = await ex.get_json("a", "/flaky", params={"key": "retry-3", "fail": 3})
        return body, sleeps, reg

    body, sleeps, reg = run(go)
    assert body == {"attempts": 4}
    assert len(sleeps) == 3
    for i, s in enumerate(sleeps):
        assert 0 <= s <= 0.05 * 2**i  # full jitter under base·2^attempt
    assert reg.get_sample_value("themis_remote_retries_total", {"peer": "a"}) == 3


def test_gives_up_after_the_retries_with_a_typed_error(server):
    async def go():
        ex, sleeps, _ = make({"a": server.url()})
        async with ex:
            with pytest.raises(PeerUnavailable) as err:
                await ex.get_json("a", "/flaky", params={"key": "retry-9", "fail": 9})
        return err.value, sleeps

    err, sleeps = run(go)
    assert (err.reason, err.status, len(sleeps)) == ("server_error", 500, 3)


def test_a_post_is_not_retried_unless_marked_idempotent(server):
    async def go():
        ex, _, _ = make({"a": server.url()}, breaker_failure_threshold=10)
        async with ex:
            with pytest.raises(PeerUnavailable):
                await ex.post_json("a", "/count?key=once", {"x": 1})
            with pytest.raises(PeerUnavailable):
                await ex.post_json("a", "/count?key=idem", {"x": 1}, idempotent=True)
            return (await ex.get_json("a", "/calls/once"))["calls"], (await ex.get_json("a", "/calls/idem"))[
                "calls"
            ]

    assert run(go) == (1, 4)


def test_a_slow_peer_times_out_instead_of_hanging(server):
    async def go():
        ex, _, _ = make({"a": server.url()}, request_timeout_s=0.2)
        async with ex:
            started = time.perf_counter()
            with pytest.raises(PeerUnavailable) as err:
                await ex.get_json("a", "/slow", params={"s": 3}, retries=0)
            return err.value, time.perf_counter() - started

    err, elapsed = run(go)
    assert err.reason == "timeout" and elapsed < 1.0


def test_a_per_call_timeout_overrides_the_setting(server):
    async def go():
        ex, _, _ = make({"a": server.url()})
        async with ex:
            with pytest.raises(PeerUnavailable) as err:
                await ex.get_json("a", "/slow", params={"s": 3}, retries=0, timeout_s=0.1)
            return err.value

    assert run(go).reason == "timeout"


def test_garbage_instead_of_json_is_a_bad_response_and_not_retried(server):
    class Ok(BaseModel):
        ok: bool

    async def go():
        ex, sleeps, _ = make({"a": server.url()})
        async with ex:
            with pytest.raises(PeerUnavailable) as not_json:
                await ex.get_json("a", "/garbage")
            with pytest.raises(PeerUnavailable) as wrong_shape:
                await ex.get_json("a", "/wrong-shape", model=Ok)
            typed = await ex.get_json("a", "/ok", model=Ok)
        return not_json.value, wrong_shape.value, typed, sleeps, ex

    not_json, wrong_shape, typed, sleeps, ex = run(go)
    assert not_json.reason == wrong_shape.reason == "bad_response"
    assert typed == Ok(ok=True) and sleeps == []
    assert ex.breakers.get("a").consecutive_failures == 0  # the last call succeeded


def test_non_http_bytes_are_a_transport_error():
    async def go(url):
        ex, _, _ = make({"junk": url})
        async with ex:
            with pytest.raises(PeerUnavailable) as err:
                await ex.get_json("junk", "/ok", retries=0)
        return err.value

    with junk_tcp_server() as url:
        assert run(lambda: go(url)).reason == "transport_error"


def test_a_4xx_is_relayed_as_peer_error_and_does_not_trip_the_breaker(server):
    async def go():
        ex, sleeps, _ = make({"a": server.url()}, breaker_failure_threshold=1)
        async with ex:
            with pytest.raises(PeerError) as err:
                await ex.get_json("a", "/status/404")
        return err.value, sleeps, ex

    err, sleeps, ex = run(go)
    assert (err.status, err.code, err.message) == (404, "not_found", "no such document")
    assert sleeps == [] and ex.open_peers() == frozenset()


def test_a_dead_peer_is_refused_fast_and_even_a_post_is_retried_because_nothing_was_sent():
    async def go():
        ex, sleeps, _ = make({"dead": dead_url()})
        async with ex:
            started = time.perf_counter()
            with pytest.raises(PeerUnavailable) as err:
                await ex.post_json("dead", "/count?key=x", {})
            return err.value, sleeps, time.perf_counter() - started

    err, sleeps, elapsed = run(go)
    assert err.reason == "connect_error" and len(sleeps) == 3 and elapsed < 1.0


def test_breaker_opens_after_five_failures_refuses_locally_then_probes_after_the_window(server):
    clock = FakeClock()
    urls = {"peer": dead_url()}

    async def go():
        ex, _, reg = make(urls, clock=clock)
        state = lambda: reg.get_sample_value("themis_circuit_breaker_state", {"peer": "peer"})  # noqa: E731
        async with ex:
            for _ in range(5):
                with pytest.raises(PeerUnavailable) as err:
                    await ex.get_json("peer", "/ok", retries=0)
                assert err.value.reason == "connect_error"
            assert state() == 2 and ex.open_peers() == {"peer"}
            started = time.perf_counter()
            with pytest.raises(PeerUnavailable) as err:
                await ex.get_json("peer", "/ok")
            refused_in = time.perf_counter() - started
            assert err.value.reason == "circuit_open"
            clock.t += 60  # recovery window over: half-open
            assert state() == 1
            urls["peer"] = server.url()  # the peer came back
            assert (await ex.get_json("peer", "/ok"))["ok"] is True  # the probe
            assert state() == 0 and ex.open_peers() == frozenset()
            return refused_in, reg

    refused_in, reg = run(go)
    assert refused_in < 0.05  # microseconds in practice; no connect attempt was made:
    connects = {"peer": "peer", "outcome": "connect_error"}
    assert reg.get_sample_value("themis_remote_requests_total", connects) == 5
    assert (
        reg.get_sample_value("themis_remote_requests_total", {"peer": "peer", "outcome": "circuit_open"}) == 1
    )


def test_a_failed_probe_reopens_the_breaker():
    clock = FakeClock()

    async def go():
        ex, _, _ = make({"peer": dead_url()}, clock=clock, breaker_failure_threshold=2)
        async with ex:
            for _ in range(2):
                with pytest.raises(PeerUnavailable):
                    await ex.get_json("peer", "/ok", retries=0)
            clock.t += 60
            with pytest.raises(PeerUnavailable) as probe:
                await ex.get_json("peer", "/ok", retries=0)
            with pytest.raises(PeerUnavailable) as after:
                await ex.get_json("peer", "/ok", retries=0)
        return probe.value.reason, after.value.reason

    assert run(go) == ("connect_error", "circuit_open")


def test_retries_stop_as_soon_as_the_breaker_opens():
    async def go():
        ex, sleeps, _ = make({"dead": dead_url()}, breaker_failure_threshold=2)
        async with ex:
            with pytest.raises(PeerUnavailable) as err:
                await ex.get_json("dead", "/ok")
        return err.value, sleeps

    err, sleeps = run(go)
    assert err.reason == "connect_error" and len(sleeps) == 1  # 2 attempts, then the breaker says no


def test_binary_get_and_post(server):
    async def go():
        ex, _, _ = make({"a": server.url()})
        async with ex:
            blob = await ex.get_bytes("a", "/blob")
            posted = await ex.post_bytes("a", "/blob", b"\x00" * 5000)
            echoed = await ex.post_json("a", "/echo", {"k": [1, 2]})
        return blob, posted, echoed

    blob, posted, echoed = run(go)
    assert blob == bytes(range(256)) * 4
    assert posted == {"received": 5000, "type": "application/octet-stream"}
    assert echoed == {"echo": {"k": [1, 2]}}


def test_mutual_tls_with_cluster_certificates(tmp_path):
    certs = pytest.importorskip("themis_core.certificates")
    from themis_shard.cluster.transport.remote import client_ssl_context, server_ssl_options

    ca_cert, ca_key = certs.generate_ca("themis")
    files = {}
    for name in ("server", "client"):
        cert, key = certs.issue_shard_cert(ca_cert, ca_key, f"shard-{name}", ["localhost"], ["127.0.0.1"])
        (tmp_path / f"{name}.crt").write_bytes(cert)
        (tmp_path / f"{name}.key").write_bytes(key)
        files[name] = (tmp_path / f"{name}.crt", tmp_path / f"{name}.key")
    (tmp_path / "ca.crt").write_bytes(ca_cert)
    ca = tmp_path / "ca.crt"

    async def go(url):
        ctx = client_ssl_context(ca, *files["client"])
        reg = CollectorRegistry()
        async with RemoteExecutor(
            ClusterSettings(), {"s": url}.__getitem__, registry=reg, ssl_context=ctx
        ) as ex:
            ok = await ex.get_json("s", "/ok")
        # Without a client certificate the server refuses the handshake.
        bare = ssl.create_default_context(cafile=str(ca))
        async with RemoteExecutor(ClusterSettings(), {"s": url}.__getitem__, ssl_context=bare) as ex:
            with pytest.raises(PeerUnavailable):
                await ex.get_json("s", "/ok", retries=0)
        return ok

    with running(**server_ssl_options(ca, *files["server"])) as s:
        assert run(lambda: go(s.url("https")))["ok"] is True


def test_large_binary_bodies_stream_in_chunks(server):
    async def go():
        ex, _, _ = make({"a": server.url()})
        async with ex:
            sizes = []
            async with ex.stream("a", "GET", "/big?mb=8", chunk_size=1 << 20) as chunks:
                async for chunk in chunks:
                    sizes.append(len(chunk))
            with pytest.raises(PeerError):
                async with ex.stream("a", "GET", "/status/404"):
                    pass
            with pytest.raises(PeerUnavailable) as died:
                async with ex.stream("a", "GET", "/big?mb=2&die=1") as chunks:
                    async for _ in chunks:
                        pass
        return sizes, died.value

    sizes, died = run(go)
    assert sum(sizes) == 8 << 20 and max(sizes) <= 1 << 20
    assert died.reason == "transport_error"


def test_an_unknown_peer_is_unavailable_not_a_crash():
    async def go():
        ex, _, _ = make({})
        async with ex:
            with pytest.raises(PeerUnavailable) as err:
                await ex.get_json("gone", "/ok")
        return err.value

    assert run(go).reason == "unknown_peer"


def test_revive_closes_a_breaker_opened_by_failures_that_are_over(server):
    """A caller that may ask no other peer (a fenced write, a primary read) probes /ready
    instead of waiting out the recovery window; a peer still down stays refused. Half-open,
    reviving leaves the one probe to the call that follows it."""
    clock = FakeClock()
    urls = {"peer": dead_url()}

    async def open_by_two_failures(ex: RemoteExecutor) -> None:
        urls["peer"] = dead_url()
        for _ in range(2):
            with pytest.raises(PeerUnavailable):
                await ex.get_json("peer", "/ok", retries=0)

    async def go():
        ex, _, _ = make(urls, clock=clock, breaker_failure_threshold=2)
        async with ex:
            await open_by_two_failures(ex)
            still_down = await ex.revive("peer")
            urls["peer"] = server.url()  # the peer came back, well inside the window
            back = await ex.revive("peer")
            answer = (await ex.get_json("peer", "/ok", retries=0))["ok"]
            await open_by_two_failures(ex)
            clock.t += 60  # half-open: one probe may go out
            urls["peer"] = server.url()
            half_open = await ex.revive("peer")
            probe = (await ex.get_json("peer", "/ok", retries=0))["ok"]
        return still_down, back, answer, half_open, probe, ex.open_peers()

    assert run(go) == (False, True, True, True, True, frozenset())


def test_callers_reviving_one_peer_at_once_share_one_probe():
    """Ten requests waiting on a slow peer's breaker send it one /ready, and all get its answer."""
    probes: list[str] = []

    async def peer(request: httpx.Request) -> httpx.Response:
        probes.append(request.url.path)
        await asyncio.sleep(0.2)
        return httpx.Response(200, json={"ok": True})

    async def go():
        settings = ClusterSettings(breaker_failure_threshold=1)
        async with RemoteExecutor(
            settings,
            lambda _: "http://peer",
            registry=CollectorRegistry(),
            transport=httpx.MockTransport(peer),
        ) as ex:
            ex.breakers.get("peer").record_failure()
            answers = await asyncio.gather(*(ex.revive("peer") for _ in range(10)))
            return answers, ex.open_peers()

    assert run(go) == ([True] * 10, frozenset())
    assert probes == ["/ready"]
