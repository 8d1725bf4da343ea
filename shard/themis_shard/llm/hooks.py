"""The seams of ``llm/``: what the engine calls back, and what the runtime is given from outside.

The engine and the runtime depend on these Protocols, never on the classes behind them, so each
side is built and tested alone and nothing in ``llm/`` imports the cluster:

| Protocol | called by | implemented by |
|---|---|---|
| ``PrefixHook`` | engine thread | ``prefix_hook.EnginePrefixHook`` |
| ``Speculator`` | engine thread | ``speculative.speculator.Speculator`` |
| ``CoreShare`` | engine thread | ``host_cores.HostCores`` |
| ``PrefixPuller`` | ``LLMRuntime.submit`` (event loop) | ``cluster.prefix_directory.PrefixSync`` |
| ``DraftResolver`` | remote draft source (engine thread) | ``cluster.service.ClusterService.draft_target`` |

Collaborators are passed to constructors (``Engine(prefix=..., speculator=..., cores=...)``,
``LLMRuntime(prefix_puller=..., draft_resolver=...)``) and never swapped afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .native import NativeContext
from .sequence import Sequence

if TYPE_CHECKING:  # annotation only: speculative/ builds on the engine, which builds on these hooks
    from .speculative.drafts import Draft


class PrefixHook(Protocol):
    """The KV-prefix cache as the engine sees it. Every call runs on the engine thread with the
    engine's own context (the hook is built before the engine, so it cannot hold the context)."""

    def on_admit(self, ctx: NativeContext, seq: Sequence) -> None:
        """``seq`` just got its empty slot: restore a cached prefix (sets ``n_cached``) and ask
        the scheduler to pause the prefill where a state should be saved (``prefill_stop``)."""

    def on_prefilled(self, ctx: NativeContext, seq: Sequence) -> None:
        """After a decode that advanced ``seq``'s prefill (``seq.prefill_stop`` is set)."""

    def on_first_token(self, seq: Sequence, ttft_s: float) -> None: ...


class Speculator(Protocol):
    """Speculative decoding as the engine sees it: draft before the batch, verify after it."""

    @property
    def concurrent(self) -> bool:
        """True when several sequences' drafts may be fetched in parallel (I/O-bound source)."""

    def drafts_at(self, decoding: int) -> bool:
        """Is drafting worth its verify rows with ``decoding`` sequences in the batch?"""

    def draft(self, seq: Sequence, limit: int) -> Draft | None:
        """Up to ``limit`` tokens to verify after ``seq``'s pending token; None = decode plainly.
        May run on a worker thread when ``concurrent``."""

    def verify(self, seq: Sequence, draft: Draft, rows: list[np.ndarray]) -> tuple[int, int]:
        """(accepted draft tokens, next token) from the k + 1 logits rows of the round."""

    def observe_iteration(self, seconds: float, extra_rows: int) -> None:
        """Timing of one decode without prefill (what verifying ``extra_rows`` costs)."""

    def calibrate(self, measure: Callable[[int], float]) -> None:
        """Once, before the first request, on the engine's thread: ``measure(k)`` times one
        decode with k + 1 logits rows on the engine's context (this machine's verify costs)."""

    def release(self, seq: Sequence) -> None:
        """``seq`` left the engine: drop whatever the draft source keeps for it."""


class CoreShare(Protocol):
    """The host's cores, shared by demand with the engines of other shards on it."""

    def mark(self, engine: str, busy: bool) -> None:
        """``engine`` has work (called before each of its steps) or has none left."""
        ...

    def threads(self, starting: bool = False) -> int:
        """Threads for the next step (``starting``: the first of a busy spell)."""
        ...
