"""``/internal/channel``: the server half of a peer channel (``cluster/transport/channel.py``).

A peer opens one WebSocket (signed like any ``/internal`` call where the cluster signs them;
under mTLS the internal listener has already checked its certificate) and sends requests as
frames. Each frame runs through this very app as an HTTP request — same routes, middleware,
metrics and error bodies — and its answer goes back as one frame with the request's id, in
whatever order the answers are ready. Frames are sealed per connection where calls are signed
(``channel_wire.Seal``); one that fails its seal closes the connection.

A peer that asks for bare frames (``framing.SUBPROTOCOL``) on a listener whose protocol offers
them (``channel_protocol.ChannelProtocol``) gets them; any other peer gets WebSocket frames,
with the same requests and answers inside.

A server stopping reads no more frames, tells a bare-frames peer the last call it read (a
GOAWAY: the peer sends the rest elsewhere at once), answers the calls it read, then closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import unquote

import orjson
from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from themis_core.logs import AccessLogSettings
from themis_core.peer_signing import channel_keys
from themis_core.tracing import NoSpans, Spans, current_trace, parse_traceparent

from ..cluster.tasks import until_done
from ..cluster.transport.channel import CHANNEL_PATH
from ..cluster.transport.channel_wire import (
    AnswerFrame,
    FrameError,
    RequestFrame,
    Seal,
    decode_request,
    encode_answer,
    encode_goaway,
)
from ..cluster.transport.framing import SUBPROTOCOL
from ..errors import ThemisError, error_body
from . import inference, internal
from .access_log import finish
from .channel_protocol import EXTENSION, BareFrames
from .frame_handlers import FrameHandler, FullRequest

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)


def direct_handlers(llm_enabled: bool) -> dict[tuple[str, str], FrameHandler]:
    """The hot routes a frame reaches without the ASGI stack, by (method, path): the engine's
    only where the app serves it (a shard without a model answers them 503 ``llm_disabled``)."""
    return {**internal.FRAME_HANDLERS, **(inference.FRAME_HANDLERS if llm_enabled else {})}


#: Requests of one connection running at once; the next frame is read when one finishes.
MAX_CONCURRENT_FRAMES = 512
#: Close code for a refused opening or a frame that fails its seal (policy violation).
POLICY_VIOLATION = 1008


@router.websocket(CHANNEL_PATH)
async def channel(websocket: WebSocket) -> None:
    shard = getattr(websocket.app.state, "node", None)
    if shard is None:  # starting: the peer uses HTTP (which answers 503 starting) for now
        await websocket.close(code=1013)
        return
    policy = shard.cluster.internal_auth
    client_nonce = ""
    if policy.required:
        headers = {k.lower(): v for k, v in websocket.headers.items()}
        reason = policy.early_refusal(headers) or policy.refusal(headers, "GET", CHANNEL_PATH, b"")
        if reason is not None:
            log.warning("refused a peer channel: %s", reason)
            await websocket.close(code=POLICY_VIOLATION)
            return
        client_nonce = headers["x-themis-nonce"]
    switch = websocket.scope.get("extensions", {}).get(EXTENSION)
    bare = switch is not None and SUBPROTOCOL in websocket.scope.get("subprotocols", ())
    await websocket.accept(subprotocol=SUBPROTOCOL if bare else None)
    server_nonce = secrets.token_hex(16)
    hello = orjson.dumps({"nonce": server_nonce, "sealed": policy.required})
    receive_seal, send_seal = Seal(None), Seal(None)
    if policy.required:
        receive_key, send_key = channel_keys(policy.secret, client_nonce, server_nonce)
        receive_seal, send_seal = Seal(receive_key), Seal(send_key)
    if bare:
        link: BareFrames = switch()
        link.write_now(hello)
        frames = _Frames(websocket.scope, receive_seal, _bare_sender(link, send_seal))

        def goaway() -> None:
            link.write_now(send_seal.seal(encode_goaway(frames.last_id)), flush=True)

        await _serve_bare(link, frames, goaway)
    else:
        await websocket.send_bytes(hello)
        sender = _websocket_sender(websocket, send_seal)
        await _serve_websocket(websocket, _Frames(websocket.scope, receive_seal, sender))


def _bare_sender(link: BareFrames, seal: Seal) -> Callable[[bytes], Awaitable[None]]:
    async def send(data: bytes) -> None:
        await link.writable()
        link.write_now(seal.seal(data))  # sealed as written: answers leave in sequence order

    return send


def _websocket_sender(websocket: WebSocket, seal: Seal) -> Callable[[bytes], Awaitable[None]]:
    lock = asyncio.Lock()

    async def send(data: bytes) -> None:
        async with lock:  # sealed in the order sent: the peer checks the sequence
            # a peer gone meanwhile reports this call as sent without an answer
            with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                await websocket.send_bytes(seal.seal(data))

    return send


async def _serve_websocket(websocket: WebSocket, frames: _Frames) -> None:
    try:
        while True:
            if not frames.accept(await websocket.receive_bytes()):
                await frames.room()
    except WebSocketDisconnect:
        pass
    except (FrameError, KeyError, RuntimeError) as exc:
        log.warning("closing a peer channel: %s", exc)
        await websocket.close(code=POLICY_VIOLATION)
    finally:
        await frames.drain()


async def _serve_bare(link: BareFrames, frames: _Frames, goaway: Callable[[], None]) -> None:
    """Run the frames ``link`` delivers until it ends; a server stopping says ``goaway`` (the
    last call it read) before the calls it read are answered and the connection closes."""

    def take(payload: bytes) -> bool:
        if link.ended.done():  # closing: the frames behind a bad one are not read
            return False
        try:
            return frames.accept(payload)
        except (FrameError, KeyError, RuntimeError) as exc:
            log.warning("closing a peer channel: %s", exc)
            link.end()
            return False

    frames.on_room = link.room
    link.consume(take)
    try:
        await link.ended
        if link.stopping:
            goaway()  # to the socket at once: the connection may close before the loop turns
    finally:
        await frames.drain()


class _Frames:
    """The calls of one connection: each frame runs as a task, its answer sent when ready."""

    def __init__(
        self, scope: dict[str, Any], receive: Seal, write: Callable[[bytes], Awaitable[None]]
    ) -> None:
        """``write`` seals and sends one answer."""
        self.receive_seal = receive
        self.write = write
        self.tasks: set[asyncio.Task] = set()
        #: The highest request id read (a GOAWAY names it).
        self.last_id = 0
        self.on_room: Callable[[], None] | None = None
        self._room = asyncio.Event()
        self.app = scope["app"]
        self.shard = self.app.state.node
        self.spans: Spans = getattr(self.app.state, "spans", None) or NoSpans()
        self.access_log: AccessLogSettings = self.shard.settings.access_log
        self.handlers = direct_handlers(self.shard.settings.llm.enabled)
        self.base_scope = {k: scope[k] for k in ("server", "client", "root_path", "state") if k in scope}
        self.base_scope["scheme"] = "https" if scope.get("scheme") == "wss" else "http"

    def accept(self, data: bytes) -> bool:
        """Start the call ``data`` carries; False once ``MAX_CONCURRENT_FRAMES`` are running
        (read no more until :meth:`room`). Raises ``FrameError`` for a frame that fails its
        seal or is malformed: the connection cannot be trusted further."""
        frame = decode_request(self.receive_seal.open(data))
        self.last_id = max(self.last_id, frame.id)
        task = asyncio.create_task(self._run(frame))
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return len(self.tasks) < MAX_CONCURRENT_FRAMES

    async def room(self) -> None:
        while len(self.tasks) >= MAX_CONCURRENT_FRAMES:
            self._room.clear()
            await self._room.wait()

    async def drain(self) -> None:
        """Calls still running finish (a write is never cut in half; answers that can no longer
        be sent are dropped), and the connection ends only then: a shard shutting down closes
        its store after its connections, never under a write."""
        await until_done(self.tasks)

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        if len(self.tasks) < MAX_CONCURRENT_FRAMES:
            self._room.set()
            if self.on_room is not None:
                self.on_room()

    async def _run(self, frame: RequestFrame) -> None:
        await self.write(encode_answer(await self._answer(frame)))

    def _direct_call(
        self, method: str, path: str, query: str, body: bytes
    ) -> tuple[str, Callable[[], Awaitable[bytes]]] | None:
        """The hot route's handler for this frame, with its route template; None: the app's."""
        handler = self.handlers.get((method, path))
        if handler is not None and not query:
            return path, partial(handler, self.shard, body)
        for (verb, prefix), (template, on_path) in internal.PATH_HANDLERS.items():
            if method == verb and path.startswith(prefix):
                return template, partial(on_path, self.shard, path[len(prefix) :], query)
        return None

    async def _answer(self, frame: RequestFrame) -> AnswerFrame:
        path, _, query = frame.target.partition("?")
        direct = self._direct_call(frame.method, path, query, frame.body)
        if direct is not None:
            try:
                return await self._direct(*direct, frame, unquote(path))
            except FullRequest:
                pass
        scope: dict[str, Any] = {
            **self.base_scope,
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": frame.method,
            "path": unquote(path),
            "raw_path": path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in frame.headers]
            + [(b"content-length", str(len(frame.body)).encode())],
            "themis.channel": True,  # authenticated by the channel: InternalAuth lets it pass
        }
        sent = False
        status, content_type, chunks = 500, "application/json", []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": frame.body, "more_body": False}
            await asyncio.Event().wait()  # a second read waits for a disconnect that never comes
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, content_type
            if message["type"] == "http.response.start":
                status = message["status"]
                for name, value in message.get("headers", ()):
                    if name.lower() == b"content-type":
                        content_type = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, receive, send)
        except Exception as exc:  # the app's own handlers answer every error; this is a bug
            log.exception("peer channel request %s %s failed", frame.method, path)
            body = orjson.dumps({"error": {"code": "internal_error", "message": type(exc).__name__}})
            return AnswerFrame(frame.id, 500, "application/json", body)
        return AnswerFrame(frame.id, status, content_type, b"".join(chunks))

    async def _direct(
        self, route: str, call: Callable[[], Awaitable[bytes]], frame: RequestFrame, path: str
    ) -> AnswerFrame:
        """A hot route's handler called directly, in a span of the caller's trace, with its
        access line and request metrics, as the app would serve it. Raises ``FullRequest``
        (nothing done, nothing logged) when the route's own validation must answer."""
        started = time.perf_counter()
        traceparent = next((v for k, v in frame.headers if k.lower() == "traceparent"), None)
        with self.spans.server(frame.method, parse_traceparent(traceparent)) as server:
            token = current_trace.set(server.context)
            try:
                try:
                    status, body = 200, await call()
                except ThemisError as exc:
                    status, body = exc.status, orjson.dumps(error_body(exc.code, exc.message))
                except FullRequest:
                    raise
                except Exception:
                    log.exception("peer channel request %s %s failed", frame.method, route)
                    status, body = 500, orjson.dumps(error_body("internal", "internal error"))
                finish(server, frame.method, path, route, status, started, self.access_log)
            finally:
                current_trace.reset(token)
        self.shard.metrics.record_request(frame.method, route, status, time.perf_counter() - started)
        return AnswerFrame(frame.id, status, getattr(body, "content_type", "application/json"), body)
