"""A Service as a TCP proxy: its loopback address and port forward to any ready pod.

One listener per Service port on the Service's address (see ``addresses``); each connection
goes to a ready endpoint chosen at random (kube-proxy's iptables mode picks at random too), and
bytes are copied both ways until either side closes. TLS passes through untouched. With no ready
endpoint the connection is closed at once (as a Service without endpoints refuses).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Mapping, Sequence


def endpoints(service: Mapping, pods: Sequence[Mapping], port: Mapping) -> list[tuple[str, int]]:
    """(podIP, targetPort) of the ready pods selected by ``service`` for ``port`` (pure)."""
    selector = service["spec"].get("selector") or {}
    if not selector:
        return []
    target = port.get("targetPort", port["port"])
    out = []
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        status = pod.get("status") or {}
        if pod["metadata"].get("namespace") != service["metadata"]["namespace"]:
            continue
        if any(labels.get(k) != v for k, v in selector.items()) or not status.get("podIP"):
            continue
        if not any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        ):
            continue
        number = target
        if isinstance(target, str) and not target.isdigit():
            named = {
                p.get("name"): p["containerPort"]
                for c in pod["spec"].get("containers") or []
                for p in c.get("ports") or []
            }
            if target not in named:
                continue
            number = named[target]
        out.append((status["podIP"], int(number)))
    return sorted(out)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class PortProxy:
    def __init__(self, address: str, port: int) -> None:
        self.address, self.port = address, port
        self.backends: list[tuple[str, int]] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.address, self.port, reuse_address=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.backends:
            writer.close()
            return
        host, port = random.choice(self.backends)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
