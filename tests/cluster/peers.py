"""Real local peers for tests and the bench: a uvicorn server in a thread, a dead port, a junk TCP server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import Counter
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route


def peer_app() -> Starlette:
    """Endpoints that behave well, slowly, wrongly or flakily — on demand."""
    calls: Counter[str] = Counter()

    async def ok(request: Request) -> Response:
        return JSONResponse({"ok": True, "client_port": request.client.port if request.client else None})

    async def flaky(request: Request) -> Response:
        key = request.query_params["key"]
        calls[key] += 1
        if calls[key] <= int(request.query_params.get("fail", "3")):
            return JSONResponse({"error": {"code": "internal", "message": "boom"}}, status_code=500)
        return JSONResponse({"attempts": calls[key]})

    async def count(request: Request) -> Response:
        key = request.query_params["key"]
        calls[key] += 1
        return JSONResponse({"error": {"code": "internal", "message": "boom"}}, status_code=500)

    async def calls_of(request: Request) -> Response:
        return JSONResponse({"calls": calls[request.path_params["key"]]})

    async def slow(request: Request) -> Response:
        await asyncio.sleep(float(request.query_params.get("s", "5")))
        return JSONResponse({"slow": True})

    async def garbage(_: Request) -> Response:
        return PlainTextResponse("<html>definitely not JSON", status_code=200)

    async def wrong_shape(_: Request) -> Response:
        return JSONResponse({"unexpected": [1, 2, 3]})

    async def status(request: Request) -> Response:
        code = int(request.path_params["code"])
        return JSONResponse({"error": {"code": "not_found", "message": "no such document"}}, status_code=code)

    async def echo(request: Request) -> Response:
        return JSONResponse({"echo": await request.json()})

    async def blob(request: Request) -> Response:
        if request.method == "POST":
            data = await request.body()
            return JSONResponse({"received": len(data), "type": request.headers.get("content-type")})
        return Response(bytes(range(256)) * 4, media_type="application/octet-stream")

    async def big(request: Request) -> Response:
        size = int(request.query_params.get("mb", "4")) << 20

        async def body():
            block = bytes(range(256)) * 4096  # 1 MiB
            for _ in range(size >> 20):
                yield block
            if request.query_params.get("die"):
                raise RuntimeError("peer died mid-stream")

        return StreamingResponse(body(), media_type="application/octet-stream")

    async def sse_stream(request: Request) -> Response:
        """``n`` token frames, each after its ``event: token`` record; ``die``: no ``[DONE]``."""
        n = int(request.query_params.get("n", "10"))

        async def body():
            for i in range(n):
                yield b"event: token\ndata: %d\n\n" % i + b'data: {"token":"t%d"}\n\n' % i
            if request.query_params.get("die"):
                raise RuntimeError("peer died mid-stream")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(body(), media_type="text/event-stream")

    async def serve(request: Request) -> Response:  # the bench's stand-in for a forwarded request
        return JSONResponse({"served_by": request.url.port})

    return Starlette(
        routes=[
            Route("/ok", ok),
            Route("/ready", ok),
            Route("/flaky", flaky),
            Route("/count", count, methods=["POST"]),
            Route("/calls/{key}", calls_of),
            Route("/slow", slow),
            Route("/garbage", garbage),
            Route("/wrong-shape", wrong_shape),
            Route("/status/{code}", status),
            Route("/echo", echo, methods=["POST"]),
            Route("/blob", blob, methods=["GET", "POST"]),
            Route("/big", big),
            Route("/sse", sse_stream),
            Route("/serve", serve, methods=["GET", "POST"]),
        ]
    )


def bound_socket() -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the listening
    # socket says TCP, and without it every response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class ServerThread:
    """uvicorn on a pre-bound 127.0.0.1 socket (no port race), in its own thread and loop."""

    def __init__(self, app=None, **config) -> None:
        self.sock = bound_socket()
        self.port = self.sock.getsockname()[1]
        cfg = uvicorn.Config(app or peer_app(), log_level="warning", lifespan="off", **config)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def url(self, scheme: str = "http", host: str = "127.0.0.1") -> str:
        return f"{scheme}://{host}:{self.port}"

    def start(self) -> ServerThread:
        self.thread.start()
        for _ in range(500):
            if self.server.started:
                return self
            threading.Event().wait(0.01)
        raise RuntimeError("test server did not start")

    def stop(self, *, force: bool = False) -> None:
        """Graceful by default (idle keep-alive connections are closed); ``force`` drops them."""
        self.server.should_exit = True
        self.server.force_exit = force
        self.thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self.sock.close()


@contextlib.contextmanager
def running(app=None, **config) -> Iterator[ServerThread]:
    server = ServerThread(app, **config).start()
    try:
        yield server
    finally:
        server.stop(force=True)


def dead_url() -> str:
    """A loopback port with nothing listening: connections are refused at once."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def junk_tcp_server() -> Iterator[str]:
    """Accepts connections and answers bytes that are not HTTP, then closes."""
    sock = bound_socket()
    sock.listen(16)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)
                conn.sendall(b"\x00\x01garbage that is not HTTP\r\n\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(timeout=2)
        sock.close()
