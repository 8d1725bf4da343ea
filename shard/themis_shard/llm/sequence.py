"""One generation request's life inside the engine, and the events it emits.

A ``Sequence`` is plain state: the scheduler decides what it does next, the engine feeds its
tokens to llama.cpp. Its token list is prompt + generated; ``n_cached`` says how many of them are
in the KV cache, so a preempted sequence (``n_cached`` reset to 0) resumes by recomputing
exactly what it had, and a decoding sequence is simply one with a single token pending.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .sampling import Constraint, Sampler, SamplingParams, TokenLogprobs
from .text import TextAssembler


@dataclass(frozen=True, slots=True)
class TokenEvent:
    token_id: int
    text: str  # text that became final with this token (may be "" while a stop string is pending)
    #: the token's log-probability and alternatives, when the request asked for them
    logprobs: TokenLogprobs | None = None
    #: a token of ``SamplingParams.replay``: already sent by the shard that died
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class DoneEvent:
    finish_reason: str  # "stop" | "length" | "cancelled"
    text: str
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float | None
    total_s: float
    queue_s: float | None
    preemptions: int
    #: prompt tokens restored from the KV-prefix cache instead of prefilled
    cached_tokens: int = 0
    #: per prompt position (the first is None): its log-probability, when the request scored it
    prompt_logprobs: tuple[TokenLogprobs | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    code: str
    message: str


Event = TokenEvent | DoneEvent | ErrorEvent
Sink = Callable[[Event], None]


@dataclass(eq=False)
class Sequence:
    rid: int  # arrival order; ties in priority go to the earlier request
    prompt: list[int]
    params: SamplingParams
    sink: Sink
    adapter: str | None = None
    priority: int = 0
    tokens: list[int] = field(default_factory=list)
    n_cached: int = 0
    slot: int | None = None
    preemptions: int = 0
    cancelled: bool = False
    t_arrival: float = field(default_factory=time.perf_counter)
    t_admitted: float | None = None
    t_first: float | None = None
    t_last: float | None = None
    #: Speculative decoding asked for; ``spec`` is the speculator's per-sequence state.
    speculative: bool = False
    spec: object | None = None
    #: KV-prefix cache (prefix_cache.py): stop the prefill at this many cached tokens to save the
    #: state there (0 = no stop); how many prompt tokens the first admission restored; whether it
    #: was admitted before (hits and misses count once per request, not per preemption).
    prefill_stop: int = 0
    prefix_restored: int = 0
    prefix_seen: bool = False
    #: leading prompt tokens other requests share (a system prompt, RAG's passages): the state
    #: is saved where they end rather than at the prompt's last block (0 = not said)
    shared_prefix: int = 0
    #: the grammar of a constrained request (owned by the sampler from here on)
    constraint: Constraint | None = None
    #: sequences of the same prompt (OpenAI ``n``) that wait for this one's prefill and then
    #: start from a copy of its cells and its first logits row
    followers: list[Sequence] = field(default_factory=list)
    #: the prompt's scores so far (``params.prompt_logprobs``), one per position from 0
    prompt_scores: list[TokenLogprobs | None] = field(default_factory=lambda: [None])

    def __post_init__(self) -> None:
        if not self.tokens:
            self.tokens = list(self.prompt)
        self.sampler = Sampler(self.params, context=self.prompt, constraint=self.constraint)
        self.assembler = TextAssembler(self.params.stop)

    @property
    def n_generated(self) -> int:
        return len(self.tokens) - len(self.prompt)

    @property
    def n_pending(self) -> int:
        """Tokens not yet in the KV cache (1 while decoding, more while (re)prefilling)."""
        return len(self.tokens) - self.n_cached

    @property
    def decoding(self) -> bool:
        return self.n_cached > 0 and self.n_pending == 1

    def order_key(self) -> tuple[int, int]:
        """Scheduling order: higher priority first, then first come first served."""
        return (-self.priority, self.rid)
