"""``/internal/channel``: the server half of a peer channel (``cluster/transport/channel.py``).

A peer opens one WebSocket (signed like any ``/internal`` call where the cluster signs them;
under mTLS the internal listener has already checked its certificate) and sends requests as
frames. Each frame runs through this very app as an HTTP request — same routes, middleware,
metrics and error bodies — and its answer goes back as one frame with the request's id, in
whatever order the answers are ready. Frames are sealed per connection where calls are signed
(``channel_wire.Seal``); one that fails its seal closes the connection.
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
from themis_core.peer_signing import channel_keys
from themis_core.tracing import NoSpans, Spans, current_trace, parse_traceparent

from ..cluster.transport.channel import CHANNEL_PATH
from ..cluster.transport.channel_wire import (
    AnswerFrame,
    FrameError,
    RequestFrame,
    Seal,
    decode_request,
    encode_answer,
)
from ..errors import ThemisError, error_body
from . import inference, internal
from .access_log import finish
from .internal import FrameHandler, FullRequest

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)


def frame_handlers(llm_enabled: bool) -> dict[tuple[str, str], FrameHandler]:
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
    await websocket.accept()
    server_nonce = secrets.token_hex(16)
    await websocket.send_bytes(orjson.dumps({"nonce": server_nonce, "sealed": policy.required}))
    if policy.required:
        receive_key, send_key = channel_keys(policy.secret, client_nonce, server_nonce)
        frames = _Frames(websocket, Seal(receive_key), Seal(send_key))
    else:
        frames = _Frames(websocket, Seal(None), Seal(None))
    await frames.serve()


class _Frames:
    def __init__(self, websocket: WebSocket, receive: Seal, send: Seal) -> None:
        self.websocket = websocket
        self.receive_seal = receive
        self.send_seal = send
        self.send_lock = asyncio.Lock()
        self.slots = asyncio.Semaphore(MAX_CONCURRENT_FRAMES)
        self.tasks: set[asyncio.Task] = set()
        ws = websocket.scope
        self.app = ws["app"]
        self.shard = self.app.state.node
        self.spans: Spans = getattr(self.app.state, "spans", None) or NoSpans()
        self.handlers = frame_handlers(self.shard.settings.llm.enabled)
        self.base_scope = {k: ws[k] for k in ("server", "client", "root_path", "state") if k in ws}
        self.base_scope["scheme"] = "https" if ws.get("scheme") == "wss" else "http"

    async def serve(self) -> None:
        try:
            while True:
                data = await self.websocket.receive_bytes()
                frame = decode_request(self.receive_seal.open(data))
                await self.slots.acquire()
                task = asyncio.create_task(self._run(frame))
                self.tasks.add(task)
                task.add_done_callback(self._done)
        except WebSocketDisconnect:
            pass
        except (FrameError, KeyError, RuntimeError) as exc:
            log.warning("closing a peer channel: %s", exc)
            await self.websocket.close(code=POLICY_VIOLATION)
        finally:
            # Calls still running finish (a write is never cut in half; their answers are
            # dropped), and the connection ends only then: a shard shutting down closes its
            # store after its connections, never under a write.
            if self.tasks:
                await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def _done(self, task: asyncio.Task) -> None:
        self.tasks.discard(task)
        self.slots.release()

    async def _run(self, frame: RequestFrame) -> None:
        answer = await self._answer(frame)
        async with self.send_lock:  # sealed in the order sent: the peer checks the sequence
            # a peer gone meanwhile reports this call as sent without an answer
            with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
                await self.websocket.send_bytes(self.send_seal.seal(encode_answer(answer)))

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
                finish(server, frame.method, path, route, status, started)
            finally:
                current_trace.reset(token)
        self.shard.metrics.record_request(frame.method, route, status, time.perf_counter() - started)
        return AnswerFrame(frame.id, status, "application/json", body)
