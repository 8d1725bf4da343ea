"""Peer channels: one persistent, multiplexed WebSocket per peer for ``/internal`` calls.

An HTTP request between shards costs each side a pass through httpx or uvicorn's HTTP parser,
connection-pool bookkeeping and a readiness syscall; under write load that was a third of a
shard's CPU. A channel sends the same request (method, path, headers, body) as one binary frame
on a connection opened once (``GET /internal/channel``, on the internal listener, signed like
any internal call or under mTLS), and the peer runs it through the same ASGI app, so every
route, check and error means what it means over HTTP. Frames carry ids, so any number of calls
share the connection and answer in any order.

It is only a transport: a peer that does not offer a channel (an older version, a test double)
or refuses the opening gets plain HTTP for ``retry_after_s``, and failures are reported as the
httpx errors the executor already classifies — never sent (``ConnectError``), sent but no
answer (``ReadError``), or no answer in time (``ReadTimeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import httpx
import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.protocol import State

from .channel_wire import AnswerFrame, FrameError, RequestFrame, Seal, decode_answer, encode_request

log = logging.getLogger(__name__)

CHANNEL_PATH = "/internal/channel"
#: Bodies above this go over HTTP (a channel frame is held whole in memory on both sides).
MAX_FRAME_BODY = 8 << 20


@runtime_checkable
class Signer(Protocol):
    """What the channel needs of ``themis_core.peer_signing.PeerAuth``."""

    def headers(self, method: str, target: str, body: bytes = b"") -> dict[str, str]: ...

    def channel_keys(self, client_nonce: str, server_nonce: str) -> tuple[bytes, bytes]: ...


class NoChannel(Exception):
    """This peer offers no channel now: use HTTP."""


class PeerChannel:
    """One open connection to one peer and the calls waiting on it."""

    def __init__(self, peer: str, ws: ClientConnection, send: Seal, receive: Seal) -> None:
        self.peer = peer
        self.ws = ws
        self._send_seal = send
        self._receive_seal = receive
        self._next_id = 0
        self._waiting: dict[int, asyncio.Future[AnswerFrame]] = {}
        self._reader = asyncio.create_task(self._read(), name=f"channel-{peer}")
        self.closed = False

    async def call(self, frame_of: Callable[[int], RequestFrame], timeout_s: float) -> AnswerFrame:
        """Send one request and wait for its answer, both within ``timeout_s`` (a peer that stops
        reading fills the socket's buffer: the send itself may wait)."""
        if self.closed or self.ws.state is not State.OPEN:  # provably not sent: safe to retry
            raise httpx.ConnectError(f"channel to {self.peer} is closed")
        self._next_id += 1
        rid = self._next_id
        future: asyncio.Future[AnswerFrame] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = future
        sent = False
        try:
            async with asyncio.timeout(timeout_s):
                try:
                    # sealing and sending happen with no await between them: frames leave in
                    # sequence order, which the peer's seal checks
                    await self.ws.send(self._send_seal.seal(encode_request(frame_of(rid))))
                except ConnectionClosed as exc:  # closed meanwhile: the frame may have left
                    self._close()
                    raise httpx.ReadError(f"channel to {self.peer} closed while sending: {exc}") from None
                sent = True
                return await asyncio.shield(future)
        except TimeoutError:
            if not sent:  # never leave a half-sent frame in front of the next one
                self._close()
            raise httpx.ReadTimeout(f"no answer from {self.peer} in {timeout_s:g} s") from None
        finally:
            self._waiting.pop(rid, None)

    async def _read(self) -> None:
        reason = "closed by the peer"
        try:
            async for message in self.ws:
                if isinstance(message, str):
                    raise FrameError("text frame on a binary channel")
                answer = decode_answer(self._receive_seal.open(message))
                future = self._waiting.get(answer.id)
                if future is not None and not future.done():
                    future.set_result(answer)
        except ConnectionClosed as exc:
            reason = f"closed: {exc}"
        except FrameError as exc:
            reason = str(exc)
            log.warning("channel to %s: %s; closing it", self.peer, exc)
        finally:
            self._fail_waiting(reason)
            self._close()

    def _fail_waiting(self, reason: str) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(httpx.ReadError(f"channel to {self.peer} {reason}"))

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            task = asyncio.ensure_future(self.ws.close())
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def aclose(self) -> None:
        self._close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        with contextlib.suppress(Exception):
            await self.ws.close()


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
        clock: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.url_of = url_of
        self.ssl_context = ssl_context
        self.signer = signer
        self.headers = dict(headers or {})
        self.connect_timeout_s = connect_timeout_s
        self.retry_after_s = retry_after_s
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
    ) -> httpx.Response:
        """One call over ``peer``'s channel. Raises :class:`NoChannel` (use HTTP) or the httpx
        error that says how far the call got."""
        if len(body) > MAX_FRAME_BODY:
            raise NoChannel(peer)
        if self._clock() < self._refused_until.get(peer, 0.0):
            self.fallbacks.labels(peer=peer).inc()
            raise NoChannel(peer)
        channel = await self._channel(peer)
        pairs = [*self.headers.items(), *headers.items()]
        answer = await channel.call(lambda rid: RequestFrame(rid, method, target, pairs, body), timeout_s)
        return httpx.Response(
            answer.status, headers={"content-type": answer.content_type}, content=answer.body
        )

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
        base = self.url_of(peer).rstrip("/")
        uri = "ws" + base.removeprefix("http") + CHANNEL_PATH
        signed = self.signer.headers("GET", CHANNEL_PATH) if self.signer is not None else {}
        try:
            ws = await connect(
                uri,
                ssl=self.ssl_context if uri.startswith("wss:") else None,
                additional_headers={**self.headers, **signed},
                compression=None,
                proxy=None,
                max_size=None,
                open_timeout=self.connect_timeout_s,
                user_agent_header=None,
            )
        except InvalidStatus as exc:
            # answered, but not with a channel (404: an older peer; 403: refused): HTTP for now
            status = exc.response.status_code
            self._refused_until[peer] = self._clock() + (self.retry_after_s if status == 404 else 5.0)
            log.info("peer %s offers no channel (HTTP %s); using HTTP", peer, status)
            self.fallbacks.labels(peer=peer).inc()
            raise NoChannel(peer) from None
        except (InvalidHandshake, ConnectionClosed, OSError, TimeoutError) as exc:
            # ConnectionClosed: the peer went away mid-handshake (killed, restarting); nothing
            # was sent on the channel yet, so the call may be retried like a refused connect
            raise httpx.ConnectError(f"channel to {peer}: {type(exc).__name__}: {exc}") from None
        try:
            hello = orjson.loads(await asyncio.wait_for(ws.recv(), self.connect_timeout_s))
            server_nonce, sealed = str(hello["nonce"]), bool(hello["sealed"])
        except (ConnectionClosed, TimeoutError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
            await ws.close()
            raise httpx.ConnectError(f"channel to {peer}: no hello ({type(exc).__name__})") from None
        if not sealed:  # the peer's transport authenticates (mTLS), or it demands nothing
            seals = Seal(None), Seal(None)
        elif self.signer is not None:
            send_key, receive_key = self.signer.channel_keys(signed["x-themis-nonce"], server_nonce)
            seals = Seal(send_key), Seal(receive_key)
        else:  # it wants sealed frames and this shard has no secret: its HTTP answer says why
            await ws.close()
            self._refused_until[peer] = self._clock() + self.retry_after_s
            raise NoChannel(peer)
        channel = PeerChannel(peer, ws, *seals)
        self._open[peer] = channel
        self.opened.labels(peer=peer).inc()
        return channel

    async def aclose(self) -> None:
        channels, self._open = list(self._open.values()), {}
        await asyncio.gather(*(c.aclose() for c in channels), return_exceptions=True)
