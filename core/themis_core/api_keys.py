"""API keys, held only as SHA-256 digests, and the ring that checks a presented key.

A key is a random token (``themis_`` + 32 url-safe bytes): high entropy, so a plain SHA-256
digest is enough to store it (a slow password hash protects guessable secrets, not these). The
ring compares the presented key's digest with every stored digest in constant time, so neither
the answer's timing nor the order of entries says which digest came close.

Entries are text lines ``<role> sha256:<hex> [name] [tenant=<tenant>]`` (``#`` starts a comment),
the format of the keys file (a Kubernetes Secret's mount) and of ``THEMIS_AUTH_KEYS`` (lines or
``;``-separated). A key without ``tenant=`` belongs to the ``default`` tenant; ``tenant ...`` lines
in the same text are the tenants' limits (``tenant_policy``), not keys.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from .access_policy import Role
from .tenant_policy import DEFAULT_TENANT, check_name, is_tenant_line

KEY_PREFIX = "themis_"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class KeyEntry:
    role: Role
    digest: str
    name: str = ""
    tenant: str = DEFAULT_TENANT

    def line(self) -> str:
        tenant = f" tenant={self.tenant}" if self.tenant != DEFAULT_TENANT else ""
        return f"{self.role.name} {self.digest} {self.name}".rstrip() + tenant


def entry_for(key: str, role: Role, name: str = "", tenant: str = DEFAULT_TENANT) -> KeyEntry:
    return KeyEntry(role, digest(key), name, tenant)


def parse_entries(text: str, *, source: str = "keys") -> list[KeyEntry]:
    """Entries from the keys file format; a malformed line is an error naming it (never skipped)."""
    out = []
    for number, raw in enumerate(text.replace(";", "\n").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line or is_tenant_line(line):
            continue
        parts = line.split()
        tenant = DEFAULT_TENANT
        if len(parts) > 2 and parts[-1].startswith("tenant="):
            tenant = check_name(parts.pop()[len("tenant=") :], source=f"{source} line {number}")
        if len(parts) not in (2, 3):
            raise ValueError(
                f"{source} line {number}: expected '<role> sha256:<hex> [name] [tenant=<tenant>]'"
            )
        role = Role.parse(parts[0])
        value = parts[1].lower()
        hexpart = value.removeprefix("sha256:")
        if (
            not value.startswith("sha256:")
            or len(hexpart) != 64
            or any(c not in "0123456789abcdef" for c in hexpart)
        ):
            raise ValueError(f"{source} line {number}: the key must be given as sha256:<64 hex digits>")
        out.append(KeyEntry(role, value, parts[2] if len(parts) == 3 else "", tenant))
    return out


class KeyRing:
    """The accepted keys; ``entry_of`` answers a presented key's entry (role, tenant), or None."""

    def __init__(self, entries: list[KeyEntry]) -> None:
        self._entries = [(bytes.fromhex(e.digest.removeprefix("sha256:")), e) for e in entries]

    def __len__(self) -> int:
        return len(self._entries)

    def role_of(self, key: str) -> Role | None:
        entry = self.entry_of(key)
        return entry.role if entry else None

    def entry_of(self, key: str) -> KeyEntry | None:
        presented = hashlib.sha256(key.encode()).digest()
        found: KeyEntry | None = None
        for stored, entry in self._entries:  # no early exit: every entry is compared
            if hmac.compare_digest(presented, stored) and found is None:
                found = entry
        return found


def bearer_token(authorization: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None when absent or another scheme."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def bearer_headers(key: str | None) -> dict[str, str]:
    """The client side: the ``Authorization`` header for ``key`` (none without a key)."""
    return {"Authorization": f"Bearer {key}"} if key else {}
