"""The peer channel's frames: one binary WebSocket message per request or answer.

A request is ``orjson([id, method, target, headers])`` + ``\\n`` + body; an answer is
``orjson([id, status, content_type])`` + ``\\n`` + body. ``id`` pairs an answer with its
request, so many requests share one connection in any order (the channel multiplexes).

An answer with id 0 (:data:`GOAWAY_ID`; requests count from 1) answers no request: it is the
peer's GOAWAY, sent when it stops. It reads no more requests on this connection and answers
those up to ``last`` (its body), so the caller knows which calls were never read (safe to send
elsewhere) instead of waiting until the connection closes to learn "sent, no answer".

Where the cluster signs shard-to-shard calls with its secret (no mTLS), every frame is sealed:
a 16-byte HMAC-SHA256 over the frame's sequence number and bytes, with a key per direction and
connection (``peer_signing.channel_keys``). A frame that is altered, replayed, reordered or
dropped then fails to open, and the receiver closes the connection.

Pure functions and one small sequence-keeping class; no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import orjson

MAC_BYTES = 16
#: OpenSSL-backed hashes release the GIL for an update of this many bytes or more.
GIL_KEEPING_BYTES = 2048


class FrameError(ValueError):
    """A frame that is not what the channel sends: the connection cannot be trusted further."""


@dataclass(frozen=True, slots=True)
class RequestFrame:
    id: int
    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass(frozen=True, slots=True)
class AnswerFrame:
    id: int
    status: int
    content_type: str
    body: bytes

    # what the remote executor reads of an HTTP response, so a frame is answered without one
    @property
    def status_code(self) -> int:
        return self.status

    @property
    def content(self) -> bytes:
        return self.body


#: The id of the GOAWAY answer (see the module's docstring).
GOAWAY_ID = 0


def encode_goaway(last: int) -> bytes:
    """The GOAWAY: requests with ids above ``last`` were not read and never will be."""
    return encode_answer(AnswerFrame(GOAWAY_ID, 200, "application/json", orjson.dumps({"last": last})))


def goaway_last(frame: AnswerFrame) -> int:
    """The last request id a GOAWAY says its sender read; :class:`FrameError` if malformed."""
    try:
        last = orjson.loads(frame.body)["last"]
    except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise FrameError(f"malformed GOAWAY: {exc}") from None
    if not isinstance(last, int):
        raise FrameError("malformed GOAWAY: last is not an integer")
    return last


def encode_request(frame: RequestFrame) -> bytes:
    head = orjson.dumps([frame.id, frame.method, frame.target, frame.headers])
    return head + b"\n" + frame.body


def decode_request(data: bytes) -> RequestFrame:
    head, body = _split(data)
    try:
        rid, method, target, headers = head
        pairs = [(str(k), str(v)) for k, v in headers]
    except (TypeError, ValueError) as exc:
        raise FrameError(f"malformed request frame: {exc}") from None
    if not isinstance(rid, int) or not isinstance(method, str) or not isinstance(target, str):
        raise FrameError("malformed request frame: id, method or target of the wrong type")
    return RequestFrame(rid, method, target, pairs, body)


def encode_answer(frame: AnswerFrame) -> bytes:
    return orjson.dumps([frame.id, frame.status, frame.content_type]) + b"\n" + frame.body


def decode_answer(data: bytes) -> AnswerFrame:
    head, body = _split(data)
    try:
        rid, status, content_type = head
    except (TypeError, ValueError) as exc:
        raise FrameError(f"malformed answer frame: {exc}") from None
    if not isinstance(rid, int) or not isinstance(status, int) or not isinstance(content_type, str):
        raise FrameError("malformed answer frame: id, status or content type of the wrong type")
    return AnswerFrame(rid, status, content_type, body)


def _split(data: bytes) -> tuple[object, bytes]:
    cut = data.find(b"\n")
    if cut < 0:
        raise FrameError("frame without a header line")
    try:
        return orjson.loads(data[:cut]), data[cut + 1 :]
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"frame header is not JSON: {exc}") from None


class Seal:
    """One direction of a connection: seals (or opens) its frames in order. ``key=None``
    (the transport itself authenticates: mTLS, or no secret) passes frames through.

    The MAC is computed without letting go of the GIL. ``hmac.digest`` always releases it, and
    an event loop that releases it to the group-commit thread waits for that thread's switch
    interval to take it back: up to a millisecond per frame. Pieces below
    :data:`GIL_KEEPING_BYTES` fed to a copy of a keyed state keep it."""

    def __init__(self, key: bytes | None) -> None:
        self.seq = 0
        self._keyed = None if key is None else hmac.new(key, digestmod=hashlib.sha256)

    def _mac(self, payload: bytes) -> bytes:
        state = self._keyed.copy()  # type: ignore[union-attr]
        state.update(self.seq.to_bytes(8, "big"))
        if len(payload) < GIL_KEEPING_BYTES:
            state.update(payload)
        else:
            view = memoryview(payload)
            for start in range(0, len(view), GIL_KEEPING_BYTES - 1):
                state.update(view[start : start + GIL_KEEPING_BYTES - 1])
        return state.digest()[:MAC_BYTES]

    def seal(self, payload: bytes) -> bytes:
        if self._keyed is None:
            return payload
        mac = self._mac(payload)
        self.seq += 1
        return mac + payload

    def open(self, data: bytes) -> bytes:
        if self._keyed is None:
            return data
        mac, payload = data[:MAC_BYTES], data[MAC_BYTES:]
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise FrameError("frame failed its seal (altered, replayed or out of order)")
        self.seq += 1
        return payload
