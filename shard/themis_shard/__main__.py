"""``python -m themis_shard`` / ``themis-shard``: run one shard process on uvicorn.

With TLS the process serves two listeners from one app: the public API (server TLS) on
``port`` and the shard-to-shard API on ``internal_port``, where the TLS handshake itself
demands a client certificate signed by the cluster CA (mTLS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import signal
import ssl
from collections.abc import Callable
from pathlib import Path

import uvicorn
from themis_core.logs import LogSettings, configure_logging

from . import __version__
from .api.channel_protocol import server_options
from .app import create_app
from .cluster.security.cert_reload import CertFiles, CertReloader
from .gc_policy import apply_after_start
from .sched_policy import apply_at_start
from .settings import Settings


class _QuietServer(uvicorn.Server):
    """A second listener: the first server owns the signal handlers and the lifespan."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


async def serve(settings: Settings, log_level: str) -> None:
    app = create_app(settings)
    tls = {}
    if settings.tls:
        tls = {
            "ssl_certfile": str(settings.tls_cert_path),
            "ssl_keyfile": str(settings.tls_key_path),
            "ssl_ca_certs": str(settings.tls_ca_path),
        }
    public = uvicorn.Server(
        uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_level=log_level,
            log_config=None,  # uvicorn's loggers propagate to ours (one format, trace ids)
            access_log=False,  # replaced by api.access_log (route templates, latency, trace id)
            timeout_graceful_shutdown=10,
            **server_options(),
            **tls,
        )
    )
    servers = [public.serve(), when_started(public, lambda: apply_after_start(settings.gc))]
    internal = None
    if settings.internal_port is not None:
        mtls = {**tls, "ssl_cert_reqs": ssl.CERT_REQUIRED} if settings.tls else {}
        internal = _QuietServer(
            uvicorn.Config(
                app,
                host=settings.host,
                port=settings.internal_port,
                log_level=log_level,
                log_config=None,
                access_log=False,
                lifespan="off",
                **server_options(),
                **mtls,
            )
        )

        async def internal_until_public_exits() -> None:
            if not await until_started(public):  # start-up failed: never open the peer listener
                return
            task = asyncio.create_task(internal.serve())
            while not public.should_exit:
                await asyncio.sleep(0.1)
            internal.should_exit = True
            await task

        servers.append(internal_until_public_exits())
    if settings.tls:
        # uvicorn builds its SSLContexts in load() (serve() skips a loaded config): load them
        # now, so the reloader holds the very contexts the listeners serve with.
        for server in (public, internal):
            if server is not None:
                server.config.load()
        reloader = asyncio.create_task(reload_certificates(settings, app, public, internal))
    try:
        await asyncio.gather(*servers)
    finally:  # a shard that fails to start exits at once, not one reload interval later
        if settings.tls:
            reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reloader


async def until_started(server: uvicorn.Server) -> bool:
    """Once ``server`` has finished its start-up: True, or False when start-up failed."""
    while not server.started and not server.should_exit:
        await asyncio.sleep(0.05)
    return server.started


async def when_started(server: uvicorn.Server, action: Callable[[], None]) -> None:
    """``action`` once ``server`` has finished its start-up (never when start-up failed)."""
    if await until_started(server):
        action()


async def reload_certificates(
    settings: Settings, app, public: uvicorn.Server, internal: uvicorn.Server | None
) -> None:
    """Renewed certificate files reach the listeners and the peer client without a restart."""
    configs = [s.config for s in (public, internal) if s is not None]

    def contexts() -> list[ssl.SSLContext]:
        found = [c.ssl for c in configs if c.ssl is not None]
        node = app.state.node
        if node is not None and node.cluster.executor.ssl_context is not None:
            found.append(node.cluster.executor.ssl_context)
        return found

    files = CertFiles(settings.tls_ca_path, settings.tls_cert_path, settings.tls_key_path)
    reloader = CertReloader(files, contexts)
    while True:  # cancelled by serve() once the listeners have stopped
        await asyncio.sleep(settings.tls_reload_interval_s)
        reloader.check()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run one Themis shard (settings also from THEMIS_* env).")
    parser.add_argument("--version", action="version", version=f"themis-shard {__version__}")
    parser.add_argument("--shard-id")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    parser.add_argument("--internal-port", type=int)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--plan", type=Path, dest="plan_path")
    parser.add_argument("--log-level", help="debug, info, ... (default: $THEMIS_LOG_LEVEL, else info)")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if v is not None and k != "log_level"}
    settings = Settings(**overrides)
    logs = LogSettings()
    level = args.log_level or logs.level
    configure_logging(level, logs.format)
    # `kill -USR1 <pid>` writes every thread's stack to the log: how to see where a shard that
    # stopped answering is stuck (it works while the event loop is blocked).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    apply_at_start(settings.sched)  # before the shard starts its threads: they inherit it
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(serve(settings, level))


def event_loop_factory():
    """uvloop's loop when it is installed (``uvicorn[standard]`` brings it), else asyncio's:
    ``asyncio.run`` here would bypass uvicorn's own ``loop="auto"`` choice."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


if __name__ == "__main__":
    main()
