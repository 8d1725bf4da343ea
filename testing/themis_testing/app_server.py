"""A real shard app on a real uvicorn server, in a thread of the test process."""

from __future__ import annotations

import threading
import time

import httpx

from .ports import free_port

__all__ = ["Server", "free_port"]


class Server:
    """A real uvicorn server running an app in a thread (a context manager)."""

    def __init__(self, app, port: int | None = None) -> None:
        """``port``: the one the app's settings name (its loopback calls, AQL's INFER)."""
        import uvicorn
        from themis_shard.api.channel_protocol import server_options

        self.app = app
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                timeout_graceful_shutdown=5,
                **server_options(),
            )
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> Server:
        self._thread.start()
        deadline = time.monotonic() + 120
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=60)

    def wait_ready(self, timeout_s: float = 300) -> None:
        """Until ``/ready`` answers 200 (the model loaded, the node caught up)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.url} not ready after {timeout_s}s")

    @property
    def llm(self):
        return self.app.state.llm
