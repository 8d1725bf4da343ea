"""Frames written during one turn of the event loop leave the socket in one ``send``.

On loopback and in-cluster networks a ``send`` costs about as much as the frame's whole
handling (the kernel runs the receiver's side of TCP in it): under load a channel wrote one per
answer. Writes are gathered and flushed by a callback at the loop's next turn, which comes
after every callback already ready has run: a lone frame waits only for that turn.
"""

from __future__ import annotations

import asyncio


class CorkedWriter:
    """Gathers ``write`` calls to one transport; order is kept."""

    __slots__ = ("_loop", "_parts", "_transport")

    def __init__(self, transport: asyncio.WriteTransport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._parts:
            self._loop.call_soon(self.flush)
        self._parts.append(data)

    def flush(self) -> None:
        """Write what is gathered now (a last frame before the connection closes)."""
        parts, self._parts = self._parts, []
        if parts and not self._transport.is_closing():
            self._transport.write(parts[0] if len(parts) == 1 else b"".join(parts))
