"""Signed shard-to-shard requests: ``/internal/...`` is refused to anyone without the cluster's
gossip secret, even without TLS.

Every internal request carries ``X-Themis-Peer`` (the sender), ``X-Themis-Timestamp`` (unix
seconds), ``X-Themis-Nonce`` (random) and ``X-Themis-Signature``: HMAC-SHA256 over method, path
with query, timestamp, nonce and the SHA-256 of the body. A receiver accepts a request only with
a valid signature, a timestamp at most ``max_age_s`` old (plus ``clock_skew_s``, and at most
``clock_skew_s`` ahead of its clock) and a nonce it has not seen in that window — so a request
cannot be forged, altered, or replayed. The two are separate settings, far above any request
timeout: a request queued at a paused or busy receiver is still a peer's when it is read, and
a sender whose request is refused sees a peer fault (``transport/remote.py``), never a client's 401.
With mTLS (the internal listener demands a cluster certificate) the certificate is the proof
and signatures are not checked. ``PeerAuth`` signs (an ``httpx.Auth`` for sync and async clients,
in ``themis_core.peer_signing``, shared with the plan authority); ``verify`` and ``NonceWindow``
check.
"""

from __future__ import annotations

import hmac
import time
from collections import OrderedDict
from collections.abc import Mapping

from themis_core.peer_signing import (
    NONCE,
    PEER,
    SIGNATURE,
    TIMESTAMP,
    PeerAuth,
    request_target,
    signature,
    signed_headers,
)

__all__ = [
    "NONCE",
    "PEER",
    "SIGNATURE",
    "TIMESTAMP",
    "InternalAuthPolicy",
    "NonceWindow",
    "PeerAuth",
    "header_refusal",
    "request_target",
    "signature",
    "signed_headers",
    "verify",
]


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


def header_refusal(
    headers: Mapping[str, str], now: float, max_age_s: float, clock_skew_s: float
) -> str | None:
    """Why this request must be refused on its headers alone, before its body is read."""
    if not all(headers.get(h) for h in (PEER, TIMESTAMP, NONCE, SIGNATURE)):
        return "unsigned shard-to-shard request"
    try:
        stamped = int(headers[TIMESTAMP])
    except ValueError:
        return "malformed timestamp"
    age = now - stamped
    if age < -clock_skew_s:
        return f"request signed {-age:.0f} s in the future; clocks may differ by at most {clock_skew_s:.0f} s"
    if age > max_age_s + clock_skew_s:
        return f"request signed {age:.0f} s ago; at most {max_age_s + clock_skew_s:.0f} s"
    return None


def verify(
    secret: bytes,
    headers: Mapping[str, str],
    method: str,
    target: str,
    body: bytes,
    now: float,
    max_age_s: float,
    nonces: NonceWindow,
    clock_skew_s: float = 0.0,
) -> str | None:
    """Why this request must be refused (None: it is a peer's)."""
    refused = header_refusal(headers, now, max_age_s, clock_skew_s)
    if refused is not None:
        return refused
    expected = signature(secret, method, target, headers[TIMESTAMP], headers[NONCE], body)
    if not hmac.compare_digest(expected, headers[SIGNATURE]):
        return "bad signature"
    if not nonces.first_time(headers[NONCE], now):
        return "replayed request"
    return None


class InternalAuthPolicy:
    """What a shard demands of ``/internal/...`` callers: a signature when it has a gossip
    secret and no mTLS (``internal_auth`` setting on), nothing otherwise."""

    def __init__(self, secret: str | None, max_age_s: float, clock_skew_s: float = 0.0) -> None:
        self.secret = secret.encode() if secret else None
        self.max_age_s = max_age_s
        self.clock_skew_s = clock_skew_s
        self.nonces = NonceWindow(max_age_s + 2 * clock_skew_s)  # every timestamp still accepted

    @classmethod
    def of(cls, settings) -> InternalAuthPolicy:
        enforce = settings.internal_auth and settings.gossip_secret is not None and not settings.tls_enabled
        return cls(
            settings.gossip_secret.get_secret_value() if enforce else None,
            settings.internal_signature_max_age_s,
            settings.internal_clock_skew_s,
        )

    @property
    def required(self) -> bool:
        return self.secret is not None

    def early_refusal(self, headers: Mapping[str, str]) -> str | None:
        """The refusal a request earns before its body is read (unsigned, expired)."""
        if self.secret is None:
            return None
        return header_refusal(headers, time.time(), self.max_age_s, self.clock_skew_s)

    def refusal(self, headers: Mapping[str, str], method: str, target: str, body: bytes) -> str | None:
        if self.secret is None:
            return None
        now = time.time()
        return verify(
            self.secret, headers, method, target, body, now, self.max_age_s, self.nonces, self.clock_skew_s
        )
