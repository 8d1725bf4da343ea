"""Signing shard-to-shard requests with the cluster's gossip secret (the sender's half).

Every internal request carries ``X-Themis-Peer`` (the sender), ``X-Themis-Timestamp`` (unix
seconds), ``X-Themis-Nonce`` (random) and ``X-Themis-Signature``: HMAC-SHA256 over method, path
with query, timestamp, nonce and the SHA-256 of the body. Shards sign with it, and so does the
plan authority (``themis up``'s supervisor, the operator); the receiver's half (``verify``,
``NonceWindow``) lives with the shard (``themis_shard.cluster.security.peer_auth``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Generator

import httpx

PEER, TIMESTAMP, NONCE, SIGNATURE = (
    "x-themis-peer",
    "x-themis-timestamp",
    "x-themis-nonce",
    "x-themis-signature",
)


def signature(secret: bytes, method: str, target: str, timestamp: str, nonce: str, body: bytes) -> str:
    message = b"\n".join(
        [
            method.upper().encode(),
            target.encode(),
            timestamp.encode(),
            nonce.encode(),
            hashlib.sha256(body).digest(),
        ]
    )
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def signed_headers(
    secret: bytes, sender: str, method: str, target: str, body: bytes, now: float
) -> dict[str, str]:
    timestamp, nonce = str(int(now)), secrets.token_hex(16)
    return {
        PEER: sender,
        TIMESTAMP: timestamp,
        NONCE: nonce,
        SIGNATURE: signature(secret, method, target, timestamp, nonce, body),
    }


def channel_keys(secret: bytes, client_nonce: str, server_nonce: str) -> tuple[bytes, bytes]:
    """Per-connection keys of a peer channel (client→server, server→client): both nonces are
    fresh per connection, so frames of an old connection never verify on a new one."""
    seed = f"{client_nonce}\n{server_nonce}".encode()
    return (
        hmac.new(secret, b"themis-channel c2s\n" + seed, hashlib.sha256).digest(),
        hmac.new(secret, b"themis-channel s2c\n" + seed, hashlib.sha256).digest(),
    )


def request_target(url: httpx.URL) -> str:
    """Path and query as sent on the request line (what both sides sign)."""
    return url.raw_path.decode("ascii")


class PeerAuth(httpx.Auth):
    """Signs every request of a client with the cluster secret (body included)."""

    requires_request_body = True

    def __init__(self, secret: str, sender: str, clock: Callable[[], float] = time.time) -> None:
        self._secret = secret.encode()
        self.sender = sender
        self._clock = clock

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        yield self(request)

    def headers(self, method: str, target: str, body: bytes = b"") -> dict[str, str]:
        """The signature headers of one request (a channel's opening handshake)."""
        return signed_headers(self._secret, self.sender, method, target, body, self._clock())

    def channel_keys(self, client_nonce: str, server_nonce: str) -> tuple[bytes, bytes]:
        return channel_keys(self._secret, client_nonce, server_nonce)

    def __call__(self, request: httpx.Request) -> httpx.Request:
        """Sign ``request`` in place (also the plain-callable form other clients accept)."""
        target = request_target(request.url)
        request.headers.update(
            signed_headers(self._secret, self.sender, request.method, target, request.content, self._clock())
        )
        return request
