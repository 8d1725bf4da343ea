"""What the runtime needs from the cluster, as Protocols: the cluster implements them, llm never
imports the cluster. Given to ``LLMRuntime`` at construction (with ``speculative.remote.Resolver``,
the cluster's choice of draft shard)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from .loaded import LoadedModel


class PrefixPuller(Protocol):
    """Pull-on-miss: fetch a KV prefix a peer holds before queueing a request that would use it."""

    def plan(self, model: LoadedModel, tokens: list[int]) -> Callable[[], Awaitable[None]] | None:
        """Synchronous, on the event loop: the pull to await first, or None to queue at once."""
