"""Gossip wire format: signed, validated messages carrying ``gossip_state`` digests and deltas.

Everything that arrives here is untrusted: the HMAC signature (cluster secret) is checked on
the raw object before the body is validated, and a message that fails any check is dropped with
a reason that labels ``themis_gossip_messages_dropped_total``. The data and merge rules live in
``gossip_state``; this module only turns them into bytes and back.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, ValidationError

from .gossip_state import AdapterCapabilityAnnouncement, Delta, Digest, MemberRecord, ShardId, Wants, _Record

MessageKind = Literal["syn", "ack", "push", "push_ack"]
DropReason = Literal["bad_shape", "bad_signature", "wrong_cluster", "stale", "too_large"]
_U64 = Annotated[int, Field(ge=0, lt=1 << 64)]
_NonNeg = Annotated[int, Field(ge=0)]


class InvalidGossipMessage(ValueError):
    """A message we drop; ``reason`` labels ``themis_gossip_messages_dropped_total``."""

    def __init__(self, reason: DropReason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class _DigestWire(_Record):
    members: dict[ShardId, tuple[_NonNeg, _NonNeg]] = Field(default_factory=dict)
    announcements: dict[Annotated[str, StringConstraints(max_length=200)], tuple[_NonNeg, float]] = Field(
        default_factory=dict
    )
    members_fp: _U64 = 0
    announcements_fp: _U64 = 0


class _DeltaWire(_Record):
    members: tuple[MemberRecord, ...] = ()
    announcements: tuple[AdapterCapabilityAnnouncement, ...] = ()


class _WantsWire(_Record):
    members: tuple[ShardId, ...] = ()
    announcements: tuple[Annotated[str, StringConstraints(max_length=200)], ...] = ()


class _Body(_Record):
    digest: _DigestWire | None = None
    delta: _DeltaWire | None = None
    wants: _WantsWire | None = None


class _Envelope(_Record):
    v: Literal[1] = 1
    cluster: str = Field(max_length=128)
    sender: ShardId
    kind: MessageKind
    sent_at: float
    body: dict[str, Any]
    signature: str = Field(pattern=r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class GossipMessage:
    sender: str
    kind: str
    sent_at: float
    digest: Digest | None = None
    delta: Delta = field(default_factory=Delta)
    wants: Wants = field(default_factory=Wants)


def canonical_json(obj: Any) -> bytes:
    """The bytes we sign: sorted keys, no spaces, UTF-8, no NaN — identical on every shard."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
        "utf-8"
    )


class GossipCodec:
    """Encodes messages as signed JSON and decodes untrusted input into a :class:`GossipMessage`.

    Signature: HMAC-SHA256 with the cluster secret over the canonical JSON of the envelope
    without its ``signature`` field. It is checked on the raw received object before the body
    is validated, so unauthenticated senders never reach the (costlier) body validation.
    """

    def __init__(
        self, cluster: str, secret: bytes, *, max_age_s: float = 30.0, max_entries: int = 20_000
    ) -> None:
        if not secret:
            raise ValueError("gossip needs a non-empty cluster secret")
        self.cluster = cluster
        self._secret = secret
        self.max_age_s = max_age_s
        self.max_entries = max_entries

    @classmethod
    def from_settings(cls, cluster: str, settings) -> GossipCodec:
        if settings.gossip_secret is None:
            raise ValueError("THEMIS_CLUSTER_GOSSIP_SECRET is not set: gossip messages must be signed")
        return cls(
            cluster,
            settings.gossip_secret.get_secret_value().encode(),
            max_age_s=settings.gossip_max_message_age_s,
            max_entries=settings.gossip_max_entries,
        )

    def _sign(self, unsigned: dict[str, Any]) -> str:
        return hmac.new(self._secret, canonical_json(unsigned), hashlib.sha256).hexdigest()

    def encode(
        self,
        sender: str,
        kind: MessageKind,
        sent_at: float,
        *,
        digest: Digest | None = None,
        delta: Delta | None = None,
        wants: Wants | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if digest is not None:
            body["digest"] = {
                "members": {k: list(v) for k, v in digest.members.items()},
                "announcements": {k: list(v) for k, v in digest.announcements.items()},
                "members_fp": digest.members_fp,
                "announcements_fp": digest.announcements_fp,
            }
        if delta is not None:
            body["delta"] = {
                "members": [r.model_dump(mode="json") for r in delta.members],
                "announcements": [a.model_dump(mode="json") for a in delta.announcements],
            }
        if wants is not None:
            body["wants"] = {"members": list(wants.members), "announcements": list(wants.announcements)}
        unsigned = {
            "v": 1,
            "cluster": self.cluster,
            "sender": sender,
            "kind": kind,
            "sent_at": sent_at,
            "body": body,
        }
        return unsigned | {"signature": self._sign(unsigned)}

    def decode(self, raw: object, now_wall: float) -> GossipMessage:
        """Validate shape, cluster, age and signature, then the body. Raises InvalidGossipMessage."""
        if isinstance(raw, bytes | bytearray | str):
            try:
                raw = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise InvalidGossipMessage("bad_shape", "not JSON") from exc
        if not isinstance(raw, dict):
            raise InvalidGossipMessage("bad_shape", "not a JSON object")
        try:
            env = _Envelope.model_validate(raw)
        except ValidationError as exc:
            raise InvalidGossipMessage("bad_shape", _first_error(exc)) from exc
        unsigned = {k: v for k, v in raw.items() if k != "signature"}
        try:
            expected = self._sign(unsigned)
        except ValueError as exc:  # NaN/Infinity somewhere: cannot be canonical
            raise InvalidGossipMessage("bad_shape", "non-canonical JSON") from exc
        if not hmac.compare_digest(expected, env.signature):
            raise InvalidGossipMessage("bad_signature")
        if env.cluster != self.cluster:
            raise InvalidGossipMessage("wrong_cluster", env.cluster)
        if abs(now_wall - env.sent_at) > self.max_age_s:
            raise InvalidGossipMessage("stale", f"sent {now_wall - env.sent_at:.1f} s ago")
        try:
            body = _Body.model_validate(env.body)
        except ValidationError as exc:
            raise InvalidGossipMessage("bad_shape", _first_error(exc)) from exc
        size = 0
        if body.digest:
            size += len(body.digest.members) + len(body.digest.announcements)
        if body.delta:
            size += len(body.delta.members) + len(body.delta.announcements)
        if body.wants:
            size += len(body.wants.members) + len(body.wants.announcements)
        if size > self.max_entries:
            raise InvalidGossipMessage("too_large", f"{size} entries")
        digest = None
        if body.digest is not None:
            d = body.digest
            digest = Digest(d.members, d.announcements, d.members_fp, d.announcements_fp)
        delta = Delta(body.delta.members, body.delta.announcements) if body.delta else Delta()
        wants = Wants(body.wants.members, body.wants.announcements) if body.wants else Wants()
        return GossipMessage(env.sender, env.kind, env.sent_at, digest, delta, wants)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', 'invalid')}"
