"""Signed shard-to-shard requests: ``/internal/...`` is refused to anyone without the cluster's
gossip secret, even without TLS.

Every internal request carries ``X-Themis-Peer`` (the sender), ``X-Themis-Timestamp`` (unix
seconds), ``X-Themis-Nonce`` (random) and ``X-Themis-Signature``: HMAC-SHA256 over method, path
with query, timestamp, nonce and the SHA-256 of the body. A receiver accepts a request only with
a valid signature, a timestamp within ``max_age_s`` of its clock and a nonce it has not seen in
that window — so a request cannot be forged, altered, or replayed. With mTLS (the internal
listener demands a cluster certificate) the certificate is the proof and signatures are not
checked. ``PeerAuth`` signs (an ``httpx.Auth``: sync and async clients); ``verify`` and
``NonceWindow`` check.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping

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


class NonceWindow:
    """Nonces seen in the last ``max_age_s`` (bounded: the oldest are forgotten first)."""

    def __init__(self, max_age_s: float, capacity: int = 200_000) -> None:
        self.max_age_s = max_age_s
        self.capacity = capacity
        self._seen: OrderedDict[str, float] = OrderedDict()

    def first_time(self, nonce: str, now: float) -> bool:
        while self._seen and (
            next(iter(self._seen.values())) < now - self.max_age_s or len(self._seen) >= self.capacity
        ):
            self._seen.popitem(last=False)
        if nonce in self._seen:
            return False
        self._seen[nonce] = now
        return True


def verify(
    secret: bytes,
    headers: Mapping[str, str],
    method: str,
    target: str,
    body: bytes,
    now: float,
    max_age_s: float,
    nonces: NonceWindow,
) -> str | None:
    """Why this request must be refused (None: it is a peer's)."""
    if not all(headers.get(h) for h in (PEER, TIMESTAMP, NONCE, SIGNATURE)):
        return "unsigned shard-to-shard request"
    try:
        stamped = int(headers[TIMESTAMP])
    except ValueError:
        return "malformed timestamp"
    if abs(now - stamped) > max_age_s:
        return f"request signed {now - stamped:.0f} s ago; at most {max_age_s:.0f} s"
    expected = signature(secret, method, target, headers[TIMESTAMP], headers[NONCE], body)
    if not hmac.compare_digest(expected, headers[SIGNATURE]):
        return "bad signature"
    if not nonces.first_time(headers[NONCE], now):
        return "replayed request"
    return None


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

    def __call__(self, request: httpx.Request) -> httpx.Request:
        """Sign ``request`` in place (also the plain-callable form other clients accept)."""
        target = request_target(request.url)
        request.headers.update(
            signed_headers(self._secret, self.sender, request.method, target, request.content, self._clock())
        )
        return request


class InternalAuthPolicy:
    """What a shard demands of ``/internal/...`` callers: a signature when it has a gossip
    secret and no mTLS (``internal_auth`` setting on), nothing otherwise."""

    def __init__(self, secret: str | None, max_age_s: float) -> None:
        self.secret = secret.encode() if secret else None
        self.max_age_s = max_age_s
        self.nonces = NonceWindow(max_age_s)

    @classmethod
    def of(cls, settings) -> InternalAuthPolicy:
        enforce = settings.internal_auth and settings.gossip_secret is not None and not settings.tls_enabled
        return cls(
            settings.gossip_secret.get_secret_value() if enforce else None, settings.gossip_max_message_age_s
        )

    @property
    def required(self) -> bool:
        return self.secret is not None

    def refusal(self, headers: Mapping[str, str], method: str, target: str, body: bytes) -> str | None:
        if self.secret is None:
            return None
        return verify(self.secret, headers, method, target, body, time.time(), self.max_age_s, self.nonces)
