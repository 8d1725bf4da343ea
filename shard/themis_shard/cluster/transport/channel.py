"""Peer channels: one persistent, multiplexed connection per peer for ``/internal`` calls.

An HTTP request between shards costs each side a pass through httpx or uvicorn's HTTP parser,
connection-pool bookkeeping and a readiness syscall; under write load that was a third of a
shard's CPU. A channel sends the same request (method, path, headers, body) as one frame on a
connection opened once (``GET /internal/channel``, a WebSocket opening on the internal
listener, signed like any internal call or under mTLS), and the peer runs it through the same
ASGI app, so every route, check and error means what it means over HTTP. Frames carry ids, so
any number of calls share the connection and answer in any order.

The opening asks for bare length-prefixed frames (``framing.SUBPROTOCOL``): after it, both
sides read and write the socket through a plain ``asyncio.Protocol``, with no WebSocket
framing, reader task or per-message flow-control syscalls between a call and its answer.

It is only a transport: a peer that does not offer a channel (an older version, a test double)
or refuses the opening gets plain HTTP for ``retry_after_s``, and failures are reported as the
httpx errors the executor already classifies — never sent (``ConnectError``), sent but no
answer (``ReadError``), or no answer in time (``ReadTimeout``). A call that times out after the
peer has sent nothing for ``silence_limit_s`` while calls waited closes the channel, so a peer
that vanished without closing its connection is reconnected to (perhaps at a new address)
instead of timing out every call; a shorter pause (a stopped or busy process) keeps it, and the
calls sent meanwhile are answered when the peer resumes.

A peer that stops (a rolling restart, a scale-in) sends a GOAWAY naming the last call it read:
the calls after it fail at once as never sent (``ConnectError``, so they go elsewhere or are
retried), the calls up to it still get their answers, and the next call opens a new connection.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx
import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge

from .channel_wire import (
    GOAWAY_ID,
    AnswerFrame,
    FrameError,
    RequestFrame,
    Seal,
    decode_answer,
    encode_request,
    goaway_last,
)
from .corked import CorkedWriter
from .framing import (
    MAX_FRAME_BODY,
    MAX_OPENING_ANSWER,
    SUBPROTOCOL,
    FrameBuffer,
    frame,
    opening_answer,
    opening_request,
)

log = logging.getLogger(__name__)

CHANNEL_PATH = "/internal/channel"
#: A peer that answers nothing for this long while calls wait is taken for gone (what a
#: WebSocket keepalive with a 20 s ping timeout would decide).
SILENCE_LIMIT_S = 20.0


@runtime_checkable
class Signer(Protocol):
    """What the channel needs of ``themis_core.peer_signing.PeerAuth``."""

    def headers(self, method: str, target: str, body: bytes = b"") -> dict[str, str]: ...

    def channel_keys(self, client_nonce: str, server_nonce: str) -> tuple[bytes, bytes]: ...


class NoChannel(Exception):
    """This peer offers no channel now: use HTTP."""


class _Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Connection(asyncio.Protocol):
    """The socket of one channel: the opening's answer, then frames, handed on as they arrive."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.writer: CorkedWriter  # from connection_made, which runs before anything writes
        self.opened: asyncio.Future[tuple[int, dict[str, str]]] = loop.create_future()
        self.hello: asyncio.Future[bytes] = loop.create_future()
        self.writable = asyncio.Event()
        self.writable.set()
        self.on_frame: Callable[[bytes], None] | None = None
        self.on_lost: Callable[[str], None] | None = None
        self._head = bytearray()
        self._frames = FrameBuffer()
        self._early: list[bytes] = []
        self.lost: str | None = None
        #: The opening was answered with bare frames.
        self.granted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.writer = CorkedWriter(self.transport, asyncio.get_running_loop())  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        try:
            if not self.opened.done():
                self._head += data
                cut = self._head.find(b"\r\n\r\n")
                if cut < 0:
                    if len(self._head) > MAX_OPENING_ANSWER:
                        raise FrameError("the answer to the opening has no end")
                    return
                status, headers = opening_answer(bytes(self._head[:cut]))
                data, self._head = bytes(self._head[cut + 4 :]), bytearray()
                self.opened.set_result((status, headers))
                self.granted = status == 101 and headers.get("sec-websocket-protocol") == SUBPROTOCOL
            if not self.granted:  # a refusal's body, or WebSocket frames: not ours to read
                return
            for payload in self._frames.feed(data):
                if not self.hello.done():
                    self.hello.set_result(payload)
                elif self.on_frame is not None:
                    self.on_frame(payload)
                else:
                    self._early.append(payload)
        except FrameError as exc:
            self._fail(str(exc))

    def attach(self, on_frame: Callable[[bytes], None], on_lost: Callable[[str], None]) -> None:
        self.on_frame, self.on_lost = on_frame, on_lost
        early, self._early = self._early, []
        for payload in early:
            on_frame(payload)
        if self.lost is not None:
            on_lost(self.lost)

    def _fail(self, reason: str) -> None:
        log.warning("peer channel: %s; closing it", reason)
        self.lost = self.lost or reason
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self.lost or (f"closed: {exc}" if exc else "closed by the peer")
        self.lost = reason
        self.writable.set()  # a sender waiting for room finds the connection gone instead
        for future in (self.opened, self.hello):
            if not future.done():
                future.set_exception(ConnectionError(reason))
                future.exception()  # read by whoever awaits it, or by no one: never logged
        if self.on_lost is not None:
            self.on_lost(reason)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()


class PeerChannel:
    """One open connection to one peer and the calls waiting on it."""

    def __init__(
        self,
        peer: str,
        connection: _Connection,
        send: Seal,
        receive: Seal,
        *,
        silence_limit_s: float = SILENCE_LIMIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.peer = peer
        self.connection = connection
        self._send_seal = send
        self._receive_seal = receive
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[AnswerFrame]] = {}
        self.silence_limit_s = silence_limit_s
        self._clock = clock
        #: When the first call the peer has not answered (nor anything since) was sent.
        self._unanswered_since: float | None = None
        self.closed = False
        #: The last call the peer said it read before stopping (its GOAWAY); None: no GOAWAY.
        self.goaway: int | None = None
        connection.attach(self._on_frame, self._on_lost)

    async def call(self, frame_of: Callable[[int], RequestFrame], timeout_s: float) -> AnswerFrame:
        """Send one request and wait for its answer, both within ``timeout_s`` (a peer that stops
        reading fills the socket's buffer: the send itself may wait)."""
        if self.closed:  # provably not sent: safe to retry
            raise httpx.ConnectError(f"channel to {self.peer} is closed")
        self._next_id += 1
        rid = self._next_id
        future: asyncio.Future[AnswerFrame] = asyncio.get_running_loop().create_future()
        if self._unanswered_since is None:
            self._unanswered_since = self._clock()
        self._waiting[rid] = future
        try:
            async with asyncio.timeout(timeout_s):
                if not self.connection.writable.is_set():
                    await self.connection.writable.wait()
                if self.closed:
                    raise httpx.ConnectError(f"channel to {self.peer} closed before sending")
                # sealed and written with no await between: frames leave in sequence order,
                # which the peer's seal checks
                self.connection.writer.write(frame(self._send_seal.seal(encode_request(frame_of(rid)))))
                return await asyncio.shield(future)
        except TimeoutError:
            self._waiting.pop(rid, None)
            now = self._clock()
            silent_s = 0.0 if self._unanswered_since is None else now - self._unanswered_since
            if silent_s >= self.silence_limit_s:
                self._close(f"silent for {silent_s:.0f} s while calls waited")
            raise httpx.ReadTimeout(f"no answer from {self.peer} in {timeout_s:g} s") from None
        finally:
            self._waiting.pop(rid, None)

    def _on_frame(self, payload: bytes) -> None:
        try:
            answer = decode_answer(self._receive_seal.open(payload))
        except FrameError as exc:
            log.warning("channel to %s: %s; closing it", self.peer, exc)
            self._close(str(exc))
            return
        self._unanswered_since = None  # the peer speaks
        if answer.id == GOAWAY_ID:
            try:
                self._on_goaway(goaway_last(answer))
            except FrameError as exc:
                log.warning("channel to %s: %s; closing it", self.peer, exc)
                self._close(str(exc))
            return
        future = self._waiting.get(answer.id)
        if future is not None and not future.done():
            future.set_result(answer)
        if self.goaway is not None:
            self._close_when_answered()

    def _on_goaway(self, last: int) -> None:
        """The peer is stopping: nothing more is sent here; the calls it did not read fail as
        never sent; the connection closes once those it read are answered."""
        log.info("channel to %s: the peer is stopping (it read calls up to %d)", self.peer, last)
        self.goaway = last
        self.closed = True
        for rid, future in self._waiting.items():
            if rid > last and not future.done():
                future.set_exception(httpx.ConnectError(f"{self.peer} is stopping: the call was not read"))
        self._close_when_answered()

    def _close_when_answered(self) -> None:
        if all(f.done() for f in self._waiting.values()) and self.connection.transport is not None:
            self.connection.transport.close()

    def _on_lost(self, reason: str) -> None:
        self.closed = True
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(httpx.ReadError(f"channel to {self.peer} {reason}"))

    def _close(self, reason: str) -> None:
        if not self.closed:
            self._on_lost(reason)
            if self.connection.transport is not None:
                self.connection.transport.close()

    async def aclose(self) -> None:
        self._close("closed by this shard")


class ChannelPool:
    """A channel per peer, opened on first use. ``url_of(peer)`` is the peer's internal base URL."""

    def __init__(
        self,
        url_of: Callable[[str], str],
        *,
        ssl_context: ssl.SSLContext | None,
        signer: Signer | None,
        headers: dict[str, str] | None = None,
        connect_timeout_s: float = 5.0,
        retry_after_s: float = 60.0,
        silence_limit_s: float = SILENCE_LIMIT_S,
        clock: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.url_of = url_of
        self.ssl_context = ssl_context
        self.signer = signer
        self.headers = dict(headers or {})
        self.connect_timeout_s = connect_timeout_s
        self.retry_after_s = retry_after_s
        self.silence_limit_s = silence_limit_s
        self._clock = clock
        self._open: dict[str, PeerChannel] = {}
        self._opening: dict[str, asyncio.Future[PeerChannel]] = {}
        self._refused_until: dict[str, float] = {}
        registry = registry or CollectorRegistry()
        self.opened = Counter(
            "themis_peer_channels_opened_total", "Peer channels opened, by peer", ["peer"], registry=registry
        )
        self.fallbacks = Counter(
            "themis_peer_channel_fallbacks_total",
            "Calls sent over HTTP because the peer offered no channel (an older version, refused)",
            ["peer"],
            registry=registry,
        )
        Gauge("themis_peer_channels_open", "Peer channels open now", registry=registry).set_function(
            lambda: sum(not c.closed for c in self._open.values())
        )

    async def request(
        self,
        peer: str,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
        timeout_s: float,
    ) -> AnswerFrame:
        """One call over ``peer``'s channel: its answer's ``status_code`` and ``content``, as
        an HTTP response has them. Raises :class:`NoChannel` (use HTTP) or the httpx error that
        says how far the call got."""
        if len(body) > MAX_FRAME_BODY:
            raise NoChannel(peer)
        if self._clock() < self._refused_until.get(peer, 0.0):
            self.fallbacks.labels(peer=peer).inc()
            raise NoChannel(peer)
        channel = await self._channel(peer)
        pairs = [*self.headers.items(), *headers.items()]
        return await channel.call(lambda rid: RequestFrame(rid, method, target, pairs, body), timeout_s)

    async def _channel(self, peer: str) -> PeerChannel:
        channel = self._open.get(peer)
        if channel is not None and not channel.closed:
            return channel
        opening = self._opening.get(peer)
        if opening is None:
            opening = asyncio.ensure_future(self._connect(peer))
            self._opening[peer] = opening
            opening.add_done_callback(lambda _f: self._opening.pop(peer, None))
        return await asyncio.shield(opening)

    async def _connect(self, peer: str) -> PeerChannel:
        try:
            connection, hello, signed = await asyncio.wait_for(
                self._open_connection(peer), self.connect_timeout_s
            )
        except _Refused as refused:
            # answered, but not with a channel (404: an older peer; 403: refused; 101 without
            # bare frames: a peer that speaks only WebSocket frames): HTTP for now
            status = refused.status
            self._refused_until[peer] = self._clock() + (self.retry_after_s if status in (101, 404) else 5.0)
            log.info("peer %s offers no channel (HTTP %s); using HTTP", peer, status)
            self.fallbacks.labels(peer=peer).inc()
            raise NoChannel(peer) from None
        except (OSError, TimeoutError, FrameError) as exc:
            # the peer went away or never answered the opening (killed, restarting, paused);
            # no call was sent on the channel, so it may be retried like a refused connect
            raise httpx.ConnectError(f"channel to {peer}: {type(exc).__name__}: {exc}") from None
        try:
            server_nonce, sealed = str(hello["nonce"]), bool(hello["sealed"])
        except (KeyError, TypeError) as exc:
            self._abort(connection)
            raise httpx.ConnectError(f"channel to {peer}: no hello ({type(exc).__name__})") from None
        if not sealed:  # the peer's transport authenticates (mTLS), or it demands nothing
            seals = Seal(None), Seal(None)
        elif self.signer is not None:
            send_key, receive_key = self.signer.channel_keys(signed["x-themis-nonce"], server_nonce)
            seals = Seal(send_key), Seal(receive_key)
        else:  # it wants sealed frames and this shard has no secret: its HTTP answer says why
            self._abort(connection)
            self._refused_until[peer] = self._clock() + self.retry_after_s
            raise NoChannel(peer)
        channel = PeerChannel(
            peer, connection, *seals, silence_limit_s=self.silence_limit_s, clock=self._clock
        )
        self._open[peer] = channel
        self.opened.labels(peer=peer).inc()
        return channel

    async def _open_connection(self, peer: str) -> tuple[_Connection, dict, dict[str, str]]:
        """Connect, open the channel with bare frames, and read the peer's hello."""
        url = urlsplit(self.url_of(peer))
        secure = url.scheme == "https"
        host, port = url.hostname or "localhost", url.port or (443 if secure else 80)
        signed = self.signer.headers("GET", CHANNEL_PATH) if self.signer is not None else {}
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            _Connection, host, port, ssl=self.ssl_context if secure else None
        )
        try:
            assert connection.transport is not None
            connection.transport.write(opening_request(url.netloc, CHANNEL_PATH, {**self.headers, **signed}))
            status, _ = await connection.opened
            if not connection.granted:
                raise _Refused(status)
            try:
                hello = orjson.loads(await connection.hello)
            except orjson.JSONDecodeError as exc:
                raise FrameError(f"the hello is not JSON: {exc}") from None
            if not isinstance(hello, dict):
                raise FrameError("the hello is not an object")
            return connection, hello, signed
        except BaseException:
            self._abort(connection)
            raise

    @staticmethod
    def _abort(connection: _Connection) -> None:
        if connection.transport is not None:
            connection.transport.abort()

    async def aclose(self) -> None:
        channels, self._open = list(self._open.values()), {}
        await asyncio.gather(*(c.aclose() for c in channels), return_exceptions=True)
