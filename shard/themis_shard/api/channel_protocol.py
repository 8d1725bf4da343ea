"""uvicorn's WebSocket protocol, able to carry a peer channel as bare frames after its opening.

The opening is an ordinary WebSocket handshake: it runs through the app (listener guard,
signature check, the ``/internal/channel`` route) like any request. When the route accepts with
the bare-frames subprotocol (``cluster/transport/framing.py``), this protocol stops speaking
WebSocket on that connection and hands every length-prefixed frame straight to the route's
consumer; answers are written to the socket as they are ready. Every other WebSocket behaves as
uvicorn's own. Passed to uvicorn as its ``ws`` protocol class (``server_options()``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from ..cluster.transport.channel_wire import FrameError
from ..cluster.transport.corked import CorkedWriter
from ..cluster.transport.framing import SUBPROTOCOL, FrameBuffer, frame

log = logging.getLogger(__name__)

#: The scope extension through which the route reaches a connection's bare frames.
EXTENSION = "themis.bare_frames"


class BareFrames:
    """One connection's bare frames, as the route sees them."""

    def __init__(self, protocol: ChannelProtocol) -> None:
        self._protocol = protocol
        self._writer = CorkedWriter(protocol.transport, asyncio.get_running_loop())
        self._buffer = FrameBuffer()
        self._early: list[bytes] = []
        self._consumer: Callable[[bytes], bool] | None = None
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.paused = False
        #: The frames end because the server is stopping (the peer is told: a GOAWAY).
        self.stopping = False

    # -- the protocol's side ------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        try:
            payloads = self._buffer.feed(data)
        except FrameError as exc:
            log.warning("closing a peer channel: %s", exc)
            self.end()
            self._protocol.transport.abort()
            return
        for payload in payloads:
            self._deliver(payload)

    def end(self) -> None:
        """No more frames will be read (the connection is gone, or the server is stopping)."""
        if not self.ended.done():
            self.ended.set_result(None)

    # -- the route's side ---------------------------------------------------------------------

    def consume(self, consumer: Callable[[bytes], bool]) -> None:
        """Hand every frame to ``consumer``; it returns False when it has no room for more, and
        reading then pauses until :meth:`room`."""
        self._consumer = consumer
        early, self._early = self._early, []
        for payload in early:
            self._deliver(payload)

    def room(self) -> None:
        if self.paused and not self.ended.done():
            self.paused = False
            self._protocol.transport.resume_reading()

    async def writable(self) -> None:
        """Until the peer reads again (the socket's buffer is over its high-water mark)."""
        if not self._protocol.writable.is_set():
            await self._protocol.writable.wait()

    def write_now(self, payload: bytes, *, flush: bool = False) -> None:
        """Write one frame (``flush``: to the socket before this returns, not at the loop's
        next turn). Nothing is written on a connection that is gone (a call's answer is lost
        with it, as the peer knows)."""
        protocol = self._protocol
        if not protocol.disconnected and not protocol.transport.is_closing():
            self._writer.write(frame(payload))
            if flush:
                self._writer.flush()

    def _deliver(self, payload: bytes) -> None:
        if self._consumer is None:
            self._early.append(payload)
        elif not self._consumer(payload) and not self.paused:
            self.paused = True
            self._protocol.transport.pause_reading()


class ChannelProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol plus the switch to bare frames."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bare: BareFrames | None = None

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:  # the app has not run yet: it sees the extension from its start
            scope["extensions"][EXTENSION] = self.switch_to_bare

    def switch_to_bare(self) -> BareFrames:
        """Called by the route right after it accepted with :data:`SUBPROTOCOL`."""
        self.stop_keepalive()  # WebSocket pings would be garbage to a bare-frames peer
        self.bare = BareFrames(self)
        return self.bare

    def data_received(self, data: bytes) -> None:
        if self.bare is not None:
            self.bare.data_received(data)
        else:
            super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.bare is not None:
            self.bare.end()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """The server is stopping: read no more frames; the route answers the calls it has and
        returns, which closes the connection."""
        if self.bare is None:
            super().shutdown()
            return
        self.stop_keepalive()
        if not self.transport.is_closing():
            self.transport.pause_reading()
        self.bare.stopping = True
        self.bare.end()


def server_options() -> dict[str, Any]:
    """The uvicorn ``Config`` arguments every shard listener is built with."""
    return {"ws": ChannelProtocol}


__all__ = ["EXTENSION", "SUBPROTOCOL", "BareFrames", "ChannelProtocol", "server_options"]
