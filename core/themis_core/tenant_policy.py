"""A tenant's policy and its line in the keys file.

The keys file (a Secret's mount, ``THEMIS_AUTH_KEYS``) holds key lines
``<role> sha256:<hex> [name] [tenant=<tenant>]`` and, in the same text, tenant lines::

    tenant <name> [requests_per_s=<r>] [tokens_per_min=<n>] [concurrency=<n>] [max_priority=<p>] [weight=<w>]

An absent limit is no limit. A key without ``tenant=`` belongs to ``default``, which has no
limits unless a ``tenant default ...`` line gives it some. Stdlib only: the operator writes these
lines without the shard's web stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

DEFAULT_TENANT = "default"
NAME = re.compile(r"^[a-z0-9]([a-z0-9_-]{0,62})$")
LINE_WORD = "tenant"


def check_name(name: str, *, source: str = "tenant") -> str:
    if not NAME.match(name):
        raise ValueError(f"{source}: tenant name {name!r} must match {NAME.pattern}")
    return name


@dataclass(frozen=True)
class TenantPolicy:
    name: str = DEFAULT_TENANT
    #: admitted requests per second (a bucket of one second's worth, at least 1)
    requests_per_s: float | None = None
    #: generation tokens charged per minute (a bucket of one minute's worth)
    tokens_per_min: int | None = None
    #: requests of this tenant running at once on the node
    concurrency: int | None = None
    #: the highest ``priority`` this tenant's requests may ask for
    max_priority: int | None = None
    #: its share when the node's in-flight slots are contended (weighted fair queueing)
    weight: int = 1

    def __post_init__(self) -> None:
        check_name(self.name)
        for name in ("requests_per_s", "tokens_per_min", "concurrency"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"tenant {self.name}: {name} must be > 0")
        if self.weight < 1:
            raise ValueError(f"tenant {self.name}: weight must be >= 1")
        if self.max_priority is not None and not -1000 <= self.max_priority <= 1000:
            raise ValueError(f"tenant {self.name}: max_priority must be within -1000..1000")

    def line(self) -> str:
        attrs = [
            f"{f.name}={_show(getattr(self, f.name))}"
            for f in fields(self)
            if f.name != "name" and getattr(self, f.name) not in (None, f.default)
        ]
        return " ".join([LINE_WORD, self.name, *attrs])


def _show(value: float | int) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


_TYPES = {
    "requests_per_s": float,
    "tokens_per_min": int,
    "concurrency": int,
    "max_priority": int,
    "weight": int,
}


def is_tenant_line(line: str) -> bool:
    return line.split(None, 1)[0].lower() == LINE_WORD if line.strip() else False


def parse_policy(line: str, *, source: str = "keys") -> TenantPolicy:
    """One ``tenant <name> key=value ...`` line; an unknown or malformed attribute is named."""
    parts = line.split()
    if len(parts) < 2 or parts[0].lower() != LINE_WORD:
        raise ValueError(f"{source}: expected 'tenant <name> [limit=value ...]'")
    name = check_name(parts[1], source=source)
    values: dict[str, float | int] = {}
    for attr in parts[2:]:
        key, sep, raw = attr.partition("=")
        if not sep or key not in _TYPES:
            raise ValueError(
                f"{source}: unknown tenant attribute {attr!r} (expected one of: {', '.join(_TYPES)})"
            )
        try:
            values[key] = _TYPES[key](raw)
        except ValueError:
            raise ValueError(f"{source}: {key} must be a number, not {raw!r}") from None
    try:
        return TenantPolicy(name, **values)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None


def parse_policies(text: str, *, source: str = "keys") -> dict[str, TenantPolicy]:
    """The tenant lines of a keys text (other lines are the key ring's); a tenant twice is an error."""
    out: dict[str, TenantPolicy] = {}
    for number, raw in enumerate(text.replace(";", "\n").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not is_tenant_line(line):
            continue
        policy = parse_policy(line, source=f"{source} line {number}")
        if policy.name in out:
            raise ValueError(f"{source} line {number}: tenant {policy.name!r} is declared twice")
        out[policy.name] = policy
    return out
