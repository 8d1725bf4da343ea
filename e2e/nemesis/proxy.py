"""Network partitions without touching the kernel: a fault-injecting TCP proxy per ordered
pair of shards, which the test controls.

Shards call each other at ``Member.peer_url`` from their plan file, so each shard gets its own
copy of the plan in which every *other* member's ``internal_url`` is the proxy for that
direction (``src → dst``); its own entry, the ring and everything else are unchanged (clients
still use the public ``url``). That is the only change to what production code sees: the
addresses. A link is

* ``open``: bytes are forwarded;
* ``drop``: bytes are black-holed in both directions, new connections are accepted and never
  answered — the peer sees timeouts, as behind a dropping firewall;
* ``reset``: every connection is aborted and new ones are closed at once.

Healing aborts every connection that lost bytes, so no HTTP stream resumes mid-message.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path


class Mode(StrEnum):
    OPEN = "open"
    DROP = "drop"
    RESET = "reset"


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tainted: bool = False

    def abort(self) -> None:
        for w in (self.client, self.upstream):
            if w is not None:
                w.transport.abort()


@dataclass(eq=False)
class Link:
    src: str
    dst: str
    target_port: int
    port: int = 0
    mode: Mode = Mode.OPEN
    conns: set[_Conn] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer)
        if self.mode is Mode.RESET:
            conn.abort()
            return
        self.conns.add(conn)
        try:
            if self.mode is Mode.DROP:
                conn.tainted = True
            else:
                try:
                    up_reader, conn.upstream = await asyncio.open_connection("127.0.0.1", self.target_port)
                except OSError:
                    conn.abort()
                    return
            pumps = [self._pump(conn, reader, conn.upstream)]
            if conn.upstream is not None:
                pumps.append(self._pump(conn, up_reader, writer))
            await asyncio.gather(*pumps)
        finally:
            self.conns.discard(conn)
            conn.abort()

    async def _pump(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                if self.mode is not Mode.OPEN or conn.tainted or writer is None:
                    conn.tainted = True
                    continue  # black-holed
                writer.write(data)
                await writer.drain()
        conn.abort()

    def set_mode(self, mode: Mode) -> None:
        self.mode = mode
        for conn in list(self.conns):
            if mode is Mode.RESET or (mode is Mode.OPEN and conn.tainted):
                conn.abort()
            elif mode is Mode.DROP:
                conn.tainted = True


class Mesh:
    """One :class:`Link` per ordered pair of shards, served from one event loop thread."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.links = {(a, b): Link(a, b, ports[b]) for a in ports for b in ports if a != b}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nemesis-proxy", daemon=True)
        self._servers: list[asyncio.Server] = []

    def start(self) -> None:
        self._thread.start()
        for link in self.links.values():
            server = self._call(asyncio.start_server(link.handle, "127.0.0.1", 0))
            link.port = server.sockets[0].getsockname()[1]
            self._servers.append(server)

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def write_plans(self, plan, root: Path) -> dict[str, Path]:
        """Each shard's plan: the others reached through this mesh's links."""
        paths = {}
        for src in {a for a, _ in self.links}:
            members = tuple(
                m
                if m.shard_id == src
                else m.model_copy(
                    update={"internal_url": f"http://127.0.0.1:{self.links[(src, m.shard_id)].port}"}
                )
                for m in plan.members
            )
            paths[src] = root / f"plan-{src}.json"
            tmp = paths[src].with_suffix(".tmp")  # atomic: a shard never reads half a plan
            tmp.write_text(plan.model_copy(update={"members": members}).to_json())
            os.replace(tmp, paths[src])
        return paths

    def cut(self, pairs: Iterable[tuple[str, str]], mode: Mode) -> None:
        async def apply() -> None:
            for pair in pairs:
                self.links[pair].set_mode(mode)

        self._call(apply())

    def heal(self) -> None:
        self.cut(list(self.links), Mode.OPEN)

    def stop(self) -> None:
        async def close() -> None:
            for server in self._servers:
                server.close()
            for link in self.links.values():
                for conn in list(link.conns):
                    conn.abort()

        with contextlib.suppress(Exception):
            self._call(close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
