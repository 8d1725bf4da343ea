"""What a generation request costs its tenant: tokens asked for and the priority it claims.

Shared by the HTTP edge (``api/tenants.py``, which reads the raw body) and the in-process
inference gateway (AQL), so both charge a request the same."""

from __future__ import annotations

from typing import Any


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def charge(body: Any, *, default_max_tokens: int) -> tuple[int, int]:
    """(tokens charged, highest priority asked) of a generation body: ``max_completion_tokens``
    or ``max_tokens`` (the engine's default when absent) × ``n``, summed over an
    ``/v1/infer:batch`` body's ``requests``. A malformed field counts as absent; the route
    itself refuses it by name."""
    if not isinstance(body, dict):
        return default_max_tokens, 0
    items = body.get("requests")
    if isinstance(items, list) and items:
        parts = [charge(item, default_max_tokens=default_max_tokens) for item in items]
        return sum(t for t, _ in parts), max(p for _, p in parts)
    budget = _int(body.get("max_completion_tokens"), 0) or _int(body.get("max_tokens"), default_max_tokens)
    return max(1, budget) * max(1, _int(body.get("n"), 1)), _int(body.get("priority"), 0)


def priority(body: Any) -> int:
    return _int(body.get("priority"), 0) if isinstance(body, dict) else 0
