"""Bare frames for a peer channel: the opening that asks for them, and their length prefixes.

A channel opens as a WebSocket (``GET /internal/channel`` with ``Upgrade: websocket``), so it
passes the same listener, middleware and signature checks as any ``/internal`` call. A shard
that asks for the :data:`SUBPROTOCOL` and is granted it then sends each frame as a 4-byte
big-endian length and the frame's bytes, on the same connection: no WebSocket framing, masking
or per-message protocol state on either side. A peer that grants the WebSocket without the
subprotocol speaks only WebSocket frames (an older version).

Pure functions and one buffer class; no I/O.
"""

from __future__ import annotations

import base64
import os

from .channel_wire import FrameError

#: The WebSocket subprotocol that means "bare length-prefixed frames from here on".
SUBPROTOCOL = "themis-frames.1"
#: Bodies above this go over HTTP (a frame is held whole in memory on both sides).
MAX_FRAME_BODY = 8 << 20
#: The largest frame either side accepts: the largest body plus its head.
MAX_FRAME = MAX_FRAME_BODY + (64 << 10)
#: The largest answer head to an opening.
MAX_OPENING_ANSWER = 64 << 10
PREFIX = 4


def frame(payload: bytes) -> bytes:
    """``payload`` with its length prefix."""
    return len(payload).to_bytes(PREFIX, "big") + payload


class FrameBuffer:
    """Bytes as they arrive in, whole frames out (a frame may span reads, a read many frames)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._data = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The frames ``data`` completes. Raises :class:`FrameError` for a frame over the limit
        (the stream cannot be trusted further)."""
        buf = self._data
        buf += data
        out: list[bytes] = []
        start = 0
        while len(buf) - start >= PREFIX:
            size = int.from_bytes(buf[start : start + PREFIX], "big")
            if size > self.max_frame:
                raise FrameError(f"a frame of {size} bytes is over the channel's {self.max_frame}")
            end = start + PREFIX + size
            if len(buf) < end:
                break
            out.append(bytes(buf[start + PREFIX : end]))
            start = end
        if start:
            del buf[:start]
        return out


def opening_request(host: str, path: str, headers: dict[str, str]) -> bytes:
    """The HTTP/1.1 request that opens a channel and asks for bare frames."""
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}",
        "Sec-WebSocket-Version: 13",
        f"Sec-WebSocket-Protocol: {SUBPROTOCOL}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def opening_answer(head: bytes) -> tuple[int, dict[str, str]]:
    """The status and headers (names lower-cased) of the answer to an opening, from its head
    (up to, not including, the blank line). Raises :class:`FrameError` for anything else."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise FrameError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise FrameError(f"malformed header line in the opening's answer: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers
