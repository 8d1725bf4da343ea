"""Spec: shard-to-shard calls travel as frames on one connection per peer (the peer channel),
opened as a WebSocket and then carrying bare length-prefixed frames; they answer exactly what
the same call answers over HTTP, stay signed and sealed where the cluster signs its calls, and
fall back to HTTP for a peer that offers no channel or only WebSocket frames. A shard still
serves a peer that speaks WebSocket frames (an older version, mid-upgrade)."""

from __future__ import annotations

import asyncio
import hmac
import sys
import threading
import time

import pytest
from prometheus_client import CollectorRegistry
from themis_core.peer_signing import PeerAuth, channel_keys
from themis_shard.app import create_app
from themis_shard.cluster.settings import ClusterSettings
from themis_shard.cluster.transport.channel_wire import (
    GOAWAY_ID,
    AnswerFrame,
    FrameError,
    RequestFrame,
    Seal,
    decode_answer,
    decode_request,
    encode_answer,
    encode_goaway,
    encode_request,
    goaway_last,
)
from themis_shard.cluster.transport.framing import (
    SUBPROTOCOL,
    FrameBuffer,
    frame,
    opening_answer,
    opening_request,
)
from themis_shard.cluster.transport.remote import PeerError, PeerUnavailable, RemoteExecutor, internal_path
from themis_testing.app_server import Server

SECRET = "cluster-secret"


# -- frames (pure) -------------------------------------------------------------------------------
def test_a_request_and_its_answer_survive_the_wire_unchanged() -> None:
    request = RequestFrame(7, "POST", "/internal/commit?x=1", [("content-type", "application/json")], b"{}\n")
    assert decode_request(encode_request(request)) == request
    answer = AnswerFrame(7, 409, "application/json", b'{"error":{}}')
    assert decode_answer(encode_answer(answer)) == answer


def test_sealed_frames_open_only_unaltered_and_in_order() -> None:
    send_key, _ = channel_keys(b"secret", "client-nonce", "server-nonce")
    sender, receiver = Seal(send_key), Seal(send_key)
    first, second = sender.seal(b"first"), sender.seal(b"second")
    assert receiver.open(first) == b"first"
    with pytest.raises(FrameError):  # replayed
        Seal(send_key).open(second)
    with pytest.raises(FrameError):  # altered
        receiver.open(second[:-1] + b"X")
    other_connection, _ = channel_keys(b"secret", "client-nonce", "another-server-nonce")
    with pytest.raises(FrameError):  # a frame of another connection
        Seal(other_connection).open(first)


@pytest.mark.parametrize("size", [0, 100, 2046, 2047, 2048, 2049, 70_000])
def test_a_seal_is_hmac_sha256_over_the_sequence_number_and_the_frame(size: int) -> None:
    """Frames of any size, however the MAC is fed, carry the MAC a peer on any version computes."""
    key, payload = b"k" * 32, bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    sender = Seal(key)
    sender.seal(b"first")
    sealed = sender.seal(payload)
    assert sealed[:16] == hmac.digest(key, (1).to_bytes(8, "big") + payload, "sha256")[:16]
    assert sealed[16:] == payload


def test_sealing_keeps_the_gil_so_the_event_loop_never_waits_behind_another_thread() -> None:
    """``hmac.digest`` lets go of the GIL; a loop that does so waits out a busy thread's switch
    interval to take it back, per frame. Sealing must not: here ten frames against a thread
    that spins Python, under a 0.2 s switch interval, take far less than one interval."""
    key = b"k" * 32
    sender, receiver = Seal(key), Seal(key)
    spinning = threading.Event()
    stop = threading.Event()

    def spin() -> None:
        spinning.set()
        while not stop.is_set():
            pass

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.2)
    thread = threading.Thread(target=spin, daemon=True)
    try:
        thread.start()
        spinning.wait()
        started = time.perf_counter()
        for size in (100, 1_500, 5_000, 40_000, 100):
            receiver.open(sender.seal(b"x" * size))
        elapsed = time.perf_counter() - started
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert elapsed < 0.2


def test_garbage_is_a_frame_error_not_a_crash() -> None:
    for data in (b"no header line", b"[1,2\n", b'["id","GET","/x",[]]\n', b"[1]\n"):
        with pytest.raises(FrameError):
            decode_request(data)


def test_bare_frames_come_out_whole_however_the_bytes_arrive() -> None:
    stream = frame(b"first") + frame(b"") + frame(b"x" * 70_000)
    whole = FrameBuffer().feed(stream)
    assert whole == [b"first", b"", b"x" * 70_000]
    buffer = FrameBuffer()
    trickled = [f for i in range(len(stream)) for f in buffer.feed(stream[i : i + 1])]
    assert trickled == whole


def test_a_frame_over_the_limit_is_a_frame_error_before_its_bytes_are_held() -> None:
    with pytest.raises(FrameError, match="over the channel"):
        FrameBuffer(max_frame=1024).feed((1025).to_bytes(4, "big") + b"x")


def test_the_opening_asks_for_bare_frames_and_its_answer_is_read_strictly() -> None:
    request = opening_request("10.0.0.7:9000", "/internal/channel", {"x-themis-nonce": "n"})
    assert request.startswith(b"GET /internal/channel HTTP/1.1\r\nHost: 10.0.0.7:9000\r\n")
    assert f"Sec-WebSocket-Protocol: {SUBPROTOCOL}".encode() in request and request.endswith(b"\r\n\r\n")
    assert b"x-themis-nonce: n\r\n" in request
    status, headers = opening_answer(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: "
        + SUBPROTOCOL.encode()
    )
    assert status == 101 and headers["sec-websocket-protocol"] == SUBPROTOCOL
    for garbage in (b"SSH-2.0-OpenSSH_9.6", b"HTTP/1.1 101 OK\r\nno colon here"):
        with pytest.raises(FrameError):
            opening_answer(garbage)


# -- a real shard app on a real server ---------------------------------------------------------
@pytest.fixture
def shard(tmp_path, monkeypatch, make_settings):
    monkeypatch.setenv("THEMIS_CLUSTER_GOSSIP_SECRET", SECRET)
    with Server(create_app(make_settings(tmp_path / "shard"))) as server:
        server.wait_ready(60)
        yield server


def executor(
    url: str, *, secret: str | None = SECRET, channel: bool = True, registry: CollectorRegistry | None = None
) -> RemoteExecutor:
    settings = ClusterSettings(peer_channel=channel, request_timeout_s=5, connect_timeout_s=2, max_retries=0)
    auth = PeerAuth(secret, "shard-9") if secret else None
    return RemoteExecutor(
        settings, {"peer": url}.__getitem__, registry=registry or CollectorRegistry(), auth=auth
    )


def run(coro):
    return asyncio.run(coro)


def test_internal_calls_answer_the_same_over_the_channel_as_over_http(shard) -> None:
    items = {"items": [{"collection": "c", "key": "k", "version": 1, "document": {"a": 1}}]}

    async def calls(channel: bool):
        async with executor(shard.url, channel=channel) as ex:
            replicated = await ex.post_json("peer", "/internal/replicate", items)
            document = await ex.get_json("peer", "/internal/documents/c/k", params={"tombstones": True})
            opened = ex.channels is not None and "peer" in ex.channels._open
        return replicated, document, opened

    over_channel = run(calls(True))
    over_http = run(calls(False))
    assert over_channel[2] is True and over_http[2] is False
    assert over_channel[1] == over_http[1] and over_channel[1]["document"] == {"a": 1}
    assert over_channel[0] == {"applied": 1} and over_http[0] == {"applied": 0}  # the same copy again


def test_many_calls_share_one_connection_and_each_gets_its_own_answer(shard) -> None:
    registry = CollectorRegistry()

    async def go():
        async with executor(shard.url, registry=registry) as ex:
            writes = [
                ex.post_json(
                    "peer",
                    "/internal/replicate",
                    {"items": [{"collection": "c", "key": f"k{i}", "version": 1, "document": {"i": i}}]},
                )
                for i in range(50)
            ]
            await asyncio.gather(*writes)
            reads = await asyncio.gather(
                *(ex.get_json("peer", f"/internal/documents/c/k{i}") for i in range(50))
            )
            return [r["document"]["i"] for r in reads], registry.get_sample_value("themis_peer_channels_open")

    values, open_channels = run(go())
    assert values == list(range(50)) and open_channels == 1
    assert registry.get_sample_value("themis_peer_channels_opened_total", {"peer": "peer"}) == 1


def test_a_refusal_crosses_the_channel_as_the_same_typed_error(shard) -> None:
    async def go():
        async with executor(shard.url) as ex:
            with pytest.raises(PeerError) as malformed:  # the hot route's own validation answers
                await ex.post_json("peer", "/internal/commit", {"writes": "not a list", "epoch": 1})
            with pytest.raises(PeerError) as missing:
                await ex.get_json("peer", "/internal/documents/c/never-written")
            return malformed.value, missing.value

    malformed, missing = run(go())
    assert (malformed.status, malformed.code) == (400, "invalid_request")
    assert "writes" in malformed.message
    assert missing.status == 404


def test_a_caller_without_the_cluster_secret_gets_no_channel_and_a_true_refusal(shard) -> None:
    async def go(secret):
        async with executor(shard.url, secret=secret) as ex:
            with pytest.raises(PeerUnavailable) as refused:
                await ex.get_json("peer", "/internal/collections")
            return refused.value, dict(ex.channels._open)

    for secret in (None, "another-secret"):
        refused, opened = run(go(secret))
        assert opened == {}  # the opening was refused; HTTP then answered 401
        assert refused.code == "peer_auth_failed", refused


def test_a_peer_that_offers_no_channel_is_called_over_http(tmp_path) -> None:
    from fastapi import FastAPI

    older = FastAPI()  # a peer of a version before channels: only HTTP routes

    @older.get("/internal/collections")
    async def collections() -> dict:
        return {"collections": ["from-http"]}

    registry = CollectorRegistry()

    async def go():
        async with executor(server.url, secret=None, registry=registry) as ex:
            first = await ex.get_json("peer", "/internal/collections")
            second = await ex.get_json("peer", "/internal/collections")
            return first, second, dict(ex.channels._open)

    with Server(older) as server:
        first, second, opened = run(go())
    assert first == second == {"collections": ["from-http"]} and opened == {}
    assert registry.get_sample_value("themis_peer_channel_fallbacks_total", {"peer": "peer"}) == 2


def test_a_peer_gone_mid_connection_is_unavailable_and_the_next_call_reconnects(
    tmp_path, monkeypatch, make_settings
) -> None:
    monkeypatch.setenv("THEMIS_CLUSTER_GOSSIP_SECRET", SECRET)
    app = create_app(make_settings(tmp_path / "shard"))
    with Server(app) as server:
        server.wait_ready(60)
        port = server.port

        async def before_and_after():
            async with executor(server.url) as ex:
                await ex.get_json("peer", "/internal/collections")
                first = ex.channels._open["peer"]
                first.connection.transport.close()  # the connection drops (a restart, a blip)
                await asyncio.sleep(0.2)
                answer = await ex.get_json("peer", "/internal/collections")
                return first.closed, ex.channels._open["peer"] is not first, answer

        was_closed, reconnected, answer = run(before_and_after())
    assert was_closed and reconnected and "collections" in answer

    async def after_exit():
        async with executor(f"http://127.0.0.1:{port}") as ex:
            with pytest.raises(PeerUnavailable) as gone:
                await ex.get_json("peer", "/internal/collections")
            return gone.value

    assert run(after_exit()).reason == "connect_error"


def test_a_stopping_peer_answers_the_calls_it_read_and_the_rest_fail_at_once_as_never_sent(
    tmp_path, monkeypatch, make_settings
) -> None:
    """A rolling restart: the peer stops while a call of ours runs on it. That call still gets
    its answer. A call sent after the peer stopped reading fails at once as never sent (so it
    can go to another copy, or be retried), not seconds later, once the running call is done,
    as "sent, no answer" (for a write: an outcome nobody can know)."""
    monkeypatch.setenv("THEMIS_CLUSTER_GOSSIP_SECRET", SECRET)
    app = create_app(make_settings(tmp_path / "shard"))

    async def slow() -> dict:
        await asyncio.sleep(3)
        return {"slept": True}

    app.add_api_route("/internal/test/slow", slow, methods=["POST"])
    server = Server(app)
    with server:
        server.wait_ready(60)

        async def go():
            async with executor(server.url) as ex:
                await ex.get_json("peer", "/internal/collections")  # the channel is open
                channel = ex.channels._open["peer"]
                running = asyncio.create_task(ex.post_json("peer", "/internal/test/slow", {}))
                await asyncio.sleep(0.3)
                server._server.should_exit = True  # SIGTERM
                await asyncio.sleep(0.3)
                with pytest.raises(PeerUnavailable) as after:
                    await ex.post_json("peer", "/internal/commit", {"writes": []})
                refused_first = not running.done()
                return await running, after.value, refused_first, channel.goaway

        answered, refused, refused_first, goaway = run(go())
    assert answered == {"slept": True}
    assert refused.reason == "connect_error" and refused_first
    assert goaway == 2  # the peer read the call that opened the channel and the slow one


def test_a_goaway_names_the_last_call_read_and_is_no_answer_to_any() -> None:
    goaway = decode_answer(encode_goaway(7))
    assert goaway.id == GOAWAY_ID and goaway_last(goaway) == 7
    assert GOAWAY_ID < 1  # request ids count from 1: no call is ever answered by a GOAWAY
    with pytest.raises(FrameError):
        goaway_last(AnswerFrame(GOAWAY_ID, 200, "application/json", b'{"last": "x"}'))


async def _raw_peer(handle) -> tuple[asyncio.Server, int]:
    """A TCP server that runs ``handle(reader, writer)`` for each connection: a peer that
    misbehaves in exactly one way."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _remote(port: int) -> RemoteExecutor:
    settings = ClusterSettings(request_timeout_s=0.5, connect_timeout_s=1, max_retries=0)
    return RemoteExecutor(
        settings, {"peer": f"http://127.0.0.1:{port}"}.__getitem__, registry=CollectorRegistry()
    )


def test_a_peer_that_drops_the_connection_mid_handshake_is_unavailable_not_an_error() -> None:
    """Killed while the channel opens: the closed connection must read as a failed connect
    (nothing was sent: retried, then a 503), never escape as an unhandled error (a 500) from
    whatever request needed the channel."""

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async def go():
        server, port = await _raw_peer(hang_up)
        async with server, _remote(port) as ex:
            with pytest.raises(PeerUnavailable) as gone:
                await ex.post_json("peer", "/internal/commit", {"writes": []})
            return gone.value

    assert run(go()).reason == "connect_error"


def _granting(then):
    """A peer that grants bare frames, says hello, then runs ``then(reader, writer)``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + f"Sec-WebSocket-Protocol: {SUBPROTOCOL}\r\n\r\n".encode()
            + frame(b'{"nonce": "n", "sealed": false}')
        )
        await then(reader, writer)
        writer.close()

    return handle


def test_a_peer_that_stops_answering_costs_the_call_its_timeout_and_a_long_silence_the_channel() -> None:
    """A peer that opened the channel and then stopped answering (paused, wedged, or gone
    without closing its connection): each call ends at its timeout as a timeout (the frame may
    have arrived: outcome unknown). A short silence keeps the connection (a paused peer answers
    on resuming); once the peer has said nothing for the silence limit while calls waited, the
    channel is closed and the next call opens a new one instead of waiting on a dead connection."""
    openings = 0

    async def silent(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        nonlocal openings
        openings += 1
        while await reader.read(65536):  # reads every frame, answers none
            pass

    async def go():
        server, port = await _raw_peer(_granting(silent))
        async with server, _remote(port) as ex:
            started = asyncio.get_running_loop().time()
            with pytest.raises(PeerUnavailable) as stalled:
                await ex.post_json("peer", "/internal/commit", {"writes": []})
            elapsed = asyncio.get_running_loop().time() - started
            first = ex.channels._open["peer"]
            kept = not first.closed
            first.silence_limit_s = 0.8  # the next timeout makes the silence longer than this
            with pytest.raises(PeerUnavailable):
                await ex.post_json("peer", "/internal/commit", {"writes": []})
            dropped = first.closed
            with pytest.raises(PeerUnavailable):
                await ex.post_json("peer", "/internal/commit", {"writes": []})
            return stalled.value, elapsed, kept, dropped, ex.channels._open["peer"] is not first

    stalled, elapsed, kept, dropped, reopened = run(go())
    assert stalled.reason == "timeout" and elapsed < 3
    assert kept and dropped and reopened and openings == 2


def test_a_peer_that_speaks_only_websocket_frames_is_called_over_http(
    tmp_path, monkeypatch, make_settings
) -> None:
    """A shard on uvicorn's own WebSocket protocol (an older version) grants the opening
    without bare frames: the caller uses HTTP, with the same answers."""
    import uvicorn
    from themis_testing.app_server import free_port

    monkeypatch.setenv("THEMIS_CLUSTER_GOSSIP_SECRET", SECRET)
    port = free_port()
    config = uvicorn.Config(create_app(make_settings(tmp_path / "shard")), host="127.0.0.1", port=port)
    server = uvicorn.Server(config)
    registry = CollectorRegistry()

    async def go():
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.05)
        try:
            async with executor(f"http://127.0.0.1:{port}", registry=registry) as ex:
                answer = await ex.get_json("peer", "/internal/collections")
                return answer, dict(ex.channels._open)
        finally:
            server.should_exit = True
            await task

    answer, opened = run(go())
    assert "collections" in answer and opened == {}
    assert registry.get_sample_value("themis_peer_channel_fallbacks_total", {"peer": "peer"}) == 1


def test_a_peer_that_speaks_websocket_frames_is_still_served(shard) -> None:
    """An older shard's channel: WebSocket messages, sealed the same way, answered the same."""
    import orjson
    from websockets.asyncio.client import connect

    async def go():
        auth = PeerAuth(SECRET, "shard-old")
        signed = auth.headers("GET", "/internal/channel")
        uri = "ws" + shard.url.removeprefix("http") + "/internal/channel"
        async with connect(uri, additional_headers=signed) as ws:
            assert ws.subprotocol is None
            hello = orjson.loads(await ws.recv())
            send_key, receive_key = auth.channel_keys(signed["x-themis-nonce"], hello["nonce"])
            send, receive = Seal(send_key), Seal(receive_key)
            await ws.send(send.seal(encode_request(RequestFrame(1, "GET", "/internal/collections", [], b""))))
            return decode_answer(receive.open(await ws.recv()))

    answer = run(go())
    assert answer.id == 1 and answer.status == 200 and "collections" in orjson_loads(answer.body)


def test_a_bare_frame_that_fails_its_seal_closes_the_connection(shard) -> None:
    async def go():
        auth = PeerAuth(SECRET, "shard-9")
        signed = auth.headers("GET", "/internal/channel")
        host = shard.url.removeprefix("http://")
        reader, writer = await asyncio.open_connection(*host.split(":"))
        writer.write(opening_request(host, "/internal/channel", signed))
        status, headers = opening_answer((await reader.readuntil(b"\r\n\r\n"))[:-4])
        assert status == 101 and headers["sec-websocket-protocol"] == SUBPROTOCOL
        size = int.from_bytes(await reader.readexactly(4), "big")
        await reader.readexactly(size)  # the hello
        forged = Seal(b"not the key").seal(
            encode_request(RequestFrame(1, "GET", "/internal/collections", [], b""))
        )
        writer.write(frame(forged))
        rest = await asyncio.wait_for(reader.read(), 5)  # the server closes: end of stream
        writer.close()
        return rest

    assert run(go()) == b""


def orjson_loads(data: bytes):
    import orjson

    return orjson.loads(data)


def test_a_direct_handler_refuses_exactly_as_its_route_does(shard) -> None:
    """EMBED by URN (in JSON, and as float32 rows) runs without the ASGI stack on the channel;
    its answers may not differ. On a shard without a model every one is the named 503, before
    the body is looked at."""

    async def refusals(channel: bool):
        async with executor(shard.url, channel=channel) as ex:
            out = []
            for path in ("/internal/embed", "/internal/embed/vectors"):
                for body in ({"urns": ["urn:themis:c:k"]}, {"urns": ["not a urn"]}, {"urns": []}):
                    with pytest.raises((PeerError, PeerUnavailable)) as refused:
                        await ex.post_json("peer", path, body)
                    out.append((refused.value.status, refused.value.code))
        return out

    over_channel, over_http = run(refusals(True)), run(refusals(False))
    assert over_channel == over_http
    assert over_channel == [(503, "llm_disabled")] * 6


def test_the_two_phase_commit_calls_answer_the_same_without_the_asgi_stack(shard) -> None:
    """A cross-shard transaction makes several internal calls (prepare, a replica's intent, the
    decider's accept, commit or abort); on the channel they run directly, and neither their
    answers nor their refusals may differ from the routes'."""

    async def calls(channel: bool, txn: str):
        async with executor(shard.url, channel=channel) as ex:
            out = []
            for path, body in (
                ("/internal/txn/accept", {"txn": txn, "participants": ["s-1"]}),
                ("/internal/txn/accept", {"txn": txn}),  # the entry that stands
                ("/internal/txn/commit", {"txn": txn}),  # nothing prepared here: a no-op
                ("/internal/txn/abort", {"txn": txn + "-other"}),
                ("/internal/txn/accept", {"participants": []}),  # no id: the route's own 400
                ("/internal/txn/prepare", {"txn": txn, "coordinator": "s-1"}),
                ("/internal/txn/replica", {"txn": txn, "unknown": 1}),
            ):
                try:
                    out.append(await ex.post_json("peer", path, body))
                except (PeerError, PeerUnavailable) as exc:
                    out.append((exc.status, exc.code))
        return out

    over_channel, over_http = run(calls(True, "t-channel")), run(calls(False, "t-http"))
    assert over_channel == over_http
    assert over_channel[:4] == [{"decision": "commit"}] * 2 + [{"committed": True}, {"aborted": True}]
    assert over_channel[4:] == [(400, "invalid_request")] * 3


def test_the_forwarded_linearizable_read_answers_the_same_without_the_asgi_stack(shard) -> None:
    """A non-primary's GET goes to the primary as ``/internal/documents/{c}/{k}?primary_epoch=N``;
    on the channel that form runs directly, every other form through the app."""
    item = {"collection": "c", "key": "k~1", "version": 1, "document": {"a": 1}}
    queries = [{"primary_epoch": e} for e in ("0", "1", "7", "x", "-1")] + [
        {"primary_epoch": "0", "tombstones": "true"},
        {"tombstones": "true"},
    ]

    async def reads(channel: bool):
        async with executor(shard.url, channel=channel) as ex:
            await ex.post_json("peer", "/internal/replicate", {"items": [item]})
            out = []
            for path in (internal_path("documents", "c", k) for k in ("k~1", "never-written", "no%20such")):
                for params in queries:
                    try:
                        out.append(await ex.get_json("peer", path, params=params))
                    except (PeerError, PeerUnavailable) as exc:
                        out.append((exc.status, exc.code))
        return out

    over_channel, over_http = run(reads(True)), run(reads(False))
    assert over_channel == over_http
    assert any(isinstance(a, dict) and a["document"] == {"a": 1} for a in over_channel)


def test_a_connection_ends_even_when_its_last_calls_finished_in_the_same_turn() -> None:
    """The calls of a channel that ends are waited for; a call that finished just before (its
    bookkeeping still queued for the loop's next turn) must not make that wait spin: it would
    hold the event loop for good and the shard would answer nothing, /health included."""
    import threading
    from types import SimpleNamespace

    from themis_core.logs import AccessLogSettings
    from themis_shard.api.channel import _Frames
    from themis_shard.cluster.transport.channel_wire import Seal

    settings = SimpleNamespace(llm=SimpleNamespace(enabled=False), access_log=AccessLogSettings())
    node = SimpleNamespace(settings=settings)
    scope = {"app": SimpleNamespace(state=SimpleNamespace(node=node))}

    async def scenario() -> None:
        frames = _Frames(scope, Seal(None), write=None)  # type: ignore[arg-type]

        async def call() -> None:
            return None

        task = asyncio.create_task(call())
        frames.tasks.add(task)
        task.add_done_callback(frames._done)
        await asyncio.sleep(0)  # the call runs and finishes; its done-callback waits for the next turn
        assert task.done() and task in frames.tasks
        await frames.drain()

    finished = threading.Event()
    threading.Thread(target=lambda: (asyncio.run(scenario()), finished.set()), daemon=True).start()
    assert finished.wait(30), "draining a connection's finished calls spun forever"
