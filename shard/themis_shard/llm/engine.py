"""The engine: one llama context per model, driven by one scheduler thread.

Each iteration the thread (1) takes new requests, cancellations and control calls from its
inbox, (2) asks the ``Scheduler`` for a plan, (3) builds one ``llama_batch`` with every planned
decode token and prefill chunk, (4) runs ``llama_decode`` (which releases the GIL, so the event
loop keeps serving) and (5) samples one token for every sequence whose pending tokens are all in
the cache. Finished and cancelled sequences leave at once and their KV cells are dropped.

Requests talk to the thread only through the inbox and their ``sink`` callback, so nothing in
here is touched from two threads at a time. Its collaborators — the KV-prefix cache and the
speculator — come in through the constructor as the Protocols of ``hooks.py``; adapters and slots
are changed through the public methods below, never by reaching into the scheduler or context.

Why one ~570-line module: everything here runs on the one scheduler thread that owns the llama
context; the scheduler, sampling, KV accounting and speculation are modules of their own.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp as L

from .generation import deliver
from .grammar import GrammarConstraint
from .hooks import CoreShare, PrefixHook, Speculator
from .kv_pages import PageLedger
from .metrics import LLMMetrics
from .native import Batch, NativeContext, NativeModel, decode_or_raise
from .sampling import SamplingParams, top_logprobs
from .scheduler import Limits, Scheduler
from .sequence import DoneEvent, ErrorEvent, Event, Sequence, Sink, TokenEvent

log = logging.getLogger(__name__)

#: Tokens of context before the decodes that time verify rounds at start-up (``_verify_seconds``).
CALIBRATION_CONTEXT = 32


class QueueFull(Exception):
    """The admission queue is at ``max_queue``: answer 429."""


class EngineClosed(Exception):
    pass


@dataclass(frozen=True, slots=True)
class EngineConfig:
    n_ctx: int = 8192
    n_threads: int = 2
    n_ubatch: int = 512
    page_size: int = 16
    max_queue: int = 1024
    limits: Limits = field(default_factory=Limits)


class Engine:
    def __init__(
        self,
        model: NativeModel,
        config: EngineConfig,
        *,
        name: str = "default",
        metrics: LLMMetrics | None = None,
        prefix: PrefixHook | None = None,
        speculator: Speculator | None = None,
        cores: CoreShare | None = None,
    ) -> None:
        """``prefix``: the KV-prefix cache; ``speculator``: used for sequences submitted with
        ``speculative=True``; ``cores``: the host's cores, shared by demand with other shards'
        engines (else ``config.n_threads`` always). All fixed for the engine's life."""
        self.model = model
        self.config = config
        self.name = name
        lim = config.limits
        self.ctx = NativeContext(
            model,
            n_ctx=config.n_ctx,
            n_seq_max=lim.max_running,
            n_batch=lim.max_tokens_per_batch,
            n_ubatch=config.n_ubatch,
            n_threads=config.n_threads,
        )
        self.ledger = PageLedger(self.ctx.n_ctx, config.page_size)
        self._prefix = prefix
        self._speculator = speculator
        self._cores = cores
        self._threads = config.n_threads
        self._computing = False  # a busy spell under way (``host_cores``)
        self.scheduler = Scheduler(self.ledger, lim, on_admit=self._on_admit if prefix is not None else None)
        self.batch = Batch(lim.max_tokens_per_batch)
        #: adapter name → (llama adapter pointer, scale); mutated only on the engine thread.
        self.adapters: dict[str, tuple[Any, float]] = {}
        self.iterations = 0
        self._draft_pool: concurrent.futures.ThreadPoolExecutor | None = None  # remote drafts
        self._metrics = metrics
        self._m = metrics.for_engine(name) if metrics else {}
        self._rids = itertools.count()
        self._inbox: deque[tuple] = deque()
        self._cv = threading.Condition()
        self._closed = False
        self._live: set[Sequence] = set()
        #: Events of the current pass, handed over together (one event-loop wake-up per pass).
        self._outbox: list[tuple[Sink, Event]] = []
        self._thread = threading.Thread(target=self._run, name=f"llm-engine-{name}", daemon=True)
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()

    @property
    def capacity_tokens(self) -> int:
        return self.ledger.capacity_cells

    # -- API for other threads -----------------------------------------------------------------

    def start(self) -> None:
        """Start the engine thread and return once it has warmed up (its error, if that fails)."""
        self._thread.start()
        self._started.result()

    def _warm_up(self) -> None:
        """One throwaway decode: llama.cpp allocates its compute graph on first use (~2 s here),
        which would otherwise land on the first request's TTFT."""
        first = min(8, self.batch.capacity)
        self.batch.clear()
        self.batch.add([0] * first, 0, 0)
        self._decode_or_raise()
        self.batch.clear()
        self.batch.add([0], first, 0)  # a decode's shape: one token after the others
        self._decode_or_raise()
        self.ctx.clear()
        if self._speculator is not None:
            self._speculator.calibrate(self._verify_seconds)
            self.ctx.clear()

    def _verify_seconds(self, extra_rows: int) -> float:
        """Seconds of one decode shaped like a speculative round's verify: ``extra_rows`` + 1
        tokens, each with logits, after a short context (built on first use, kept for the next
        call). Only before the engine's first request."""
        if self.ctx.seq_pos_max(0) < CALIBRATION_CONTEXT - 1:
            self.batch.clear()
            self.batch.add([0] * CALIBRATION_CONTEXT, 0, 0, logits="none")
            self._decode_or_raise()
        self.batch.clear()
        self.batch.add([0] * (extra_rows + 1), CALIBRATION_CONTEXT, 0, logits="all")
        t0 = time.perf_counter()
        self._decode_or_raise()
        seconds = time.perf_counter() - t0
        self.ctx.drop_tail(0, CALIBRATION_CONTEXT)
        return seconds

    def _decode_or_raise(self) -> None:
        """A warm-up that did not compute leaves the first request to pay for the graph, and a
        timing of a failed decode is no timing."""
        decode_or_raise(self.ctx, self.batch, "warming up")

    def stop(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._draft_pool is not None:
            self._draft_pool.shutdown(wait=False, cancel_futures=True)
        self.ctx.close()

    def submit(
        self,
        prompt: list[int],
        params: SamplingParams,
        sink: Sink,
        *,
        adapter: str | None = None,
        priority: int = 0,
        speculative: bool = False,
        shared_prefix: int = 0,
    ) -> Sequence:
        return self.submit_group(
            prompt,
            [params],
            [sink],
            adapter=adapter,
            priority=priority,
            speculative=speculative,
            shared_prefix=shared_prefix,
        )[0]

    def submit_group(
        self,
        prompt: list[int],
        params: list[SamplingParams],
        sinks: list[Sink],
        *,
        adapter: str | None = None,
        priority: int = 0,
        speculative: bool = False,
        shared_prefix: int = 0,
    ) -> list[Sequence]:
        """Queue one prompt for ``len(params)`` sequences (OpenAI ``n``): the first prefills it and
        the others start from a copy of its cells when it is done (one prefill for all; a
        follower that finds no slot then queues and prefills itself). FIFO within a priority.
        Raises ``QueueFull`` beyond ``max_queue``,
        ``GrammarError`` for a grammar llama.cpp cannot compile. Speculative decoding applies to
        plain sampling only (its verification knows no penalties, grammars or logprobs).
        ``shared_prefix``: leading prompt tokens other requests share (where the KV-prefix cache
        saves the state)."""
        constraints = [
            GrammarConstraint(self.model.vocab, self.model.n_vocab, p.grammar) if p.grammar else None
            for p in params
        ]
        with self._cv:
            if self._closed:
                raise EngineClosed("engine is stopping")
            # Not yet admitted = new in the inbox + waiting; free running slots will take some at once.
            queued = sum(1 for op in self._inbox if op[0] == "add") + self.scheduler.n_waiting
            free_slots = self.config.limits.max_running - len(self.scheduler.running)
            if queued >= self.config.max_queue + max(0, free_slots):
                if self._m:
                    self._m["rejected"].inc()
                raise QueueFull(f"{queued} requests queued")
            seqs = [
                Sequence(
                    rid=next(self._rids),
                    prompt=list(prompt),
                    params=p,
                    sink=sink,
                    adapter=adapter,
                    priority=priority,
                    speculative=speculative and p.plain,
                    constraint=c,
                    shared_prefix=shared_prefix,
                )
                for p, sink, c in zip(params, sinks, constraints, strict=True)
            ]
            seqs[0].followers = seqs[1:]
            self._inbox.append(("add", seqs[0]))
            self._cv.notify()
        return seqs

    def cancel(self, seq: Sequence) -> None:
        """Stop generating for ``seq`` and free its KV (client went away)."""
        with self._cv:
            self._inbox.append(("cancel", seq))
            self._cv.notify()

    def call(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Run ``fn`` on the engine thread between iterations (adapter changes, inspection)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        with self._cv:
            if self._closed:
                raise EngineClosed("engine is stopping")
            self._inbox.append(("call", fn, fut))
            self._cv.notify()
        return fut

    def attach_adapter(self, name: str, path: str, scale: float) -> concurrent.futures.Future:
        """Load a GGUF LoRA on the engine thread and serve it as ``name``; the future's result is
        its llama.cpp pointer, or None when llama.cpp rejected the file (nothing is attached)."""

        def attach() -> object | None:
            ptr = L.llama_adapter_lora_init(self.model.ptr, path.encode())
            if ptr:
                self.adapters[name] = (ptr, scale)
            return ptr or None

        return self.call(attach)

    def detach_adapter(self, name: str) -> concurrent.futures.Future:
        """Fail every sequence (running or waiting) on adapter ``name``, then free it — on the
        engine thread, so no decode can be using it at that moment."""

        def detach() -> None:
            for seq in list(self._live):  # running, waiting, and followers not yet forked
                if seq.adapter == name:
                    self._fail(seq, "adapter_unloaded", f"adapter {name!r} was unloaded")
            ptr, _ = self.adapters.pop(name)
            self.ctx.set_adapters([])
            L.llama_adapter_lora_free(ptr)

        return self.call(detach)

    def free_slot(self) -> int | None:
        """A sequence slot no sequence holds (for a trial load of a KV state), or None. Engine
        thread only (inside ``call``): admission may take it in the next iteration."""
        return self.scheduler.free_slot()

    def stats(self) -> dict[str, int]:
        return {
            "running": len(self.scheduler.running),
            "queued": self.scheduler.n_waiting,
            "kv_pages_used": self.ledger.used_pages,
            "kv_pages_free": self.ledger.free_pages,
            "kv_pages_total": self.ledger.total_pages,
            "kv_page_size": self.ledger.page_size,
            "preemptions": self.scheduler.preemptions,
            "iterations": self.iterations,
        }

    # -- engine thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        # Every decode of this context, the warm-up's included, runs on this one thread: llama.cpp
        # computes with OpenMP, whose runtime keeps a worker pool per calling thread, and once
        # its pools hold more threads than there are cores, every barrier of every graph sleeps
        # in the kernel instead of spinning (decoding ran at half speed in a shard).
        try:
            self._warm_up()
        except BaseException as exc:
            self._started.set_exception(exc)
            return
        self._started.set_result(None)
        try:
            while True:
                with self._cv:
                    if self._cores is not None and not self._inbox and self.scheduler.idle:
                        self._cores.mark(self.name, False)
                        self._computing = False
                    while not self._inbox and self.scheduler.idle and not self._closed:
                        self._cv.wait()
                    if self._closed:
                        break
                    ops = list(self._inbox)
                    self._inbox.clear()
                for op in ops:
                    self._apply(op)
                if not self.scheduler.idle:
                    self._take_cores()
                    try:
                        self._iterate()
                    except Exception:
                        log.exception("engine iteration failed")
                        self._fail_running("engine_error", "inference failed")
                self._update_gauges()
                self._flush()
        finally:
            if self._cores is not None:
                self._cores.mark(self.name, False)
            self._drain_on_close()
            self._flush()

    def _take_cores(self) -> None:
        """This step's share of the host's cores (``host_cores``)."""
        if self._cores is None:
            return
        starting = not self._computing
        self._computing = True
        self._cores.mark(self.name, True)
        threads = self._cores.threads(starting)
        if threads != self._threads:
            self.ctx.set_threads(threads)
            self._threads = threads

    def _apply(self, op: tuple) -> None:
        kind = op[0]
        if kind == "add":
            seq = op[1]
            self._live.add(seq)
            self._live.update(seq.followers)
            self.scheduler.enqueue(seq)
        elif kind == "cancel":
            seq = op[1]
            if seq in self._live:
                self._finish(seq, "cancelled")
        elif kind == "call":
            _, fn, fut = op
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:
                    fut.set_exception(exc)

    def _iterate(self) -> None:
        plan = self.scheduler.step()
        now = time.perf_counter()
        for seq in plan.admitted:
            if seq.t_admitted is None:
                seq.t_admitted = now
                if self._m:
                    self._m["queue"].observe(now - seq.t_arrival)
        for _seq, slot in plan.preempted:
            self.ctx.drop_seq(slot)
            if self._m:
                self._m["preemptions"].inc()
        for seq, slot in plan.exhausted:
            self.ctx.drop_seq(slot)
            self._finish(seq, "length", removed=True)
        if not plan.work:
            return
        self._apply_adapter(plan.adapter)
        batch = self.batch
        batch.clear()
        outputs: list[tuple[Sequence, int, int | None, Any]] = []
        prefill = sum(n for seq, n in plan.work if not seq.decoding)
        drafts = self._drafts(plan.work, batch.capacity - plan.n_tokens)
        scoring: list[tuple[Sequence, int, int, int]] = []  # (seq, first position, batch index, n)
        for seq, n in plan.work:
            a = seq.n_cached
            completes = a + n == len(seq.tokens)
            draft = drafts.get(seq.rid) if completes else None
            if draft is None:
                mode = "last" if completes else "none"
                if seq.params.prompt_logprobs is not None and len(seq.prompt_scores) < len(seq.prompt):
                    mode = "all"  # every prompt position's row, to score the next prompt token
                idx = batch.add(seq.tokens[a : a + n], a, seq.slot, logits=mode)
                if mode == "all":
                    scoring.append((seq, a, idx - n + 1, n))
            else:  # speculative round: pending token + draft, logits for each to verify them
                idx = batch.add(seq.tokens[a : a + n] + draft.tokens, a, seq.slot, logits="all")
            outputs.append((seq, n, idx if completes else None, draft))
        t_decode = time.perf_counter()
        rc = self.ctx.decode(batch)
        t_decode = time.perf_counter() - t_decode
        self.iterations += 1
        if rc == 1:  # no KV slot despite the ledger (fragmentation): give way and retry next time
            forced = self.scheduler.preempt_latest()
            if forced is None:
                self._fail_running("kv_exhausted", "the KV cache cannot hold this sequence")
            else:
                self.ctx.drop_seq(forced[1])
                if self._m:
                    self._m["preemptions"].inc()
            return
        if rc != 0:
            log.error("llama_decode returned %d for a batch of %d tokens", rc, batch.n)
            for seq, *_ in outputs:
                self._fail(seq, "decode_failed", f"llama_decode failed ({rc})")
            return
        if self._m:
            self._m["batch_size"].observe(len(outputs))
            self._m["batch_tokens"].observe(batch.n)
            if prefill:
                self._m["prompt_tokens"].inc(prefill)
        if self._speculator is not None and not prefill:
            self._speculator.observe_iteration(t_decode, sum(len(o[3].tokens) for o in outputs if o[3]))
        for seq, a, first, n in scoring:
            self._score_prompt(seq, a, first, n)
        for seq, n, idx, draft in outputs:
            seq.n_cached += n
            if self._prefix is not None and seq.prefill_stop:
                self._prefix.on_prefilled(self.ctx, seq)
            if idx is None:
                continue
            if draft is None:
                row = self.ctx.logits(idx)
                if seq.followers and seq.n_generated == 0:
                    self._fork(seq, row)
                token = seq.sampler.sample(row)  # a replayed step draws too, as the first run did
                replay, n = seq.params.replay, seq.n_generated
                if n < len(replay):
                    self._on_token(seq, replay[n], seq.sampler.last_logprobs, replayed=True)
                else:
                    self._on_token(seq, token, seq.sampler.last_logprobs)
            else:
                self._verify_draft(seq, idx, draft)

    def _fork(self, seq: Sequence, row) -> None:
        """``seq`` just finished its prefill: its followers take a copy of its cells and draw
        their first token from the same logits row (no prefill of their own)."""
        followers, seq.followers = seq.followers, []
        now = time.perf_counter()
        for f in followers:
            if f not in self._live:  # cancelled while waiting
                continue
            if not self.scheduler.adopt(f):
                self.scheduler.enqueue(f)
                continue
            self.ctx.copy_seq(seq.slot, f.slot)
            f.prompt_scores = seq.prompt_scores
            f.t_admitted = now
            self._on_token(f, f.sampler.sample(row), f.sampler.last_logprobs)

    def _release_followers(self, seq: Sequence) -> None:
        """A leader that ends before its prefill did leaves its followers to queue on their own."""
        followers, seq.followers = seq.followers, []
        for f in followers:
            if f in self._live:
                self.scheduler.enqueue(f)

    def _score_prompt(self, seq: Sequence, a: int, first: int, n: int) -> None:
        """Rows ``first..first+n`` hold the model's guess for prompt positions ``a+1..a+n``;
        positions already scored (before a preemption) are not scored twice."""
        k = seq.params.prompt_logprobs or 0
        for j in range(n):
            pos = a + j + 1
            if pos < len(seq.prompt) and pos == len(seq.prompt_scores):
                seq.prompt_scores.append(top_logprobs(self.ctx.logits(first + j), seq.prompt[pos], k))

    def _on_admit(self, seq: Sequence) -> None:
        if seq.params.prompt_logprobs is not None:
            return  # a restored prefix would leave its positions unscored

        self._prefix.on_admit(self.ctx, seq)  # type: ignore[union-attr] - only set with a prefix hook

    # -- speculative decoding hook (logic in speculative/) ---------------------------------------

    def _drafts(self, work, spare: int) -> dict:
        """Draft tokens per decoding speculative sequence (rid → Draft), within ``spare`` batch
        room. A remote source's round trips run in parallel (``source.concurrent``): one
        iteration waits for the slowest draft, not for the sum of them."""
        if self._speculator is None or spare <= 0:
            return {}
        cands = [s for s, n in work if n == 1 and s.speculative and s.n_cached + 1 == len(s.tokens)]
        if not cands or not self._speculator.drafts_at(sum(1 for s, _ in work if s.decoding)):
            return {}
        limits = [self._draft_limit(s, spare // len(cands)) for s in cands]
        if len(cands) > 1 and self._speculator.concurrent:
            if self._draft_pool is None:
                self._draft_pool = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="draft")
            found = list(self._draft_pool.map(self._propose, cands, limits))
        else:
            found = [self._propose(s, lim) for s, lim in zip(cands, limits, strict=True)]
        out = {}
        for seq, draft in zip(cands, found, strict=True):
            if draft is not None and self.ledger.grow(seq, seq.n_cached + 1 + len(draft.tokens)):
                out[seq.rid] = draft  # (no free pages for the draft's cells: decode plainly)
        return out

    def _draft_limit(self, seq: Sequence, spare: int) -> int:
        a = seq.n_cached
        return min(spare, seq.params.max_tokens - seq.n_generated - 1, self.ledger.capacity_cells - a - 2)

    def _propose(self, seq: Sequence, limit: int):
        """Draft tokens to verify after ``seq``'s pending token, or None for a plain round."""
        return self._speculator.draft(seq, limit) if limit > 0 else None  # type: ignore[union-attr]

    def _verify_draft(self, seq: Sequence, idx: int, draft) -> None:
        """Rejection-sample the draft against the k + 1 logits rows ending at ``idx``; keep the
        accepted cells, drop the rejected ones, emit accepted tokens + the target's next one."""
        k = len(draft.tokens)
        rows = [self.ctx.logits(idx - k + j) for j in range(k + 1)]
        n_acc, nxt = self._speculator.verify(seq, draft, rows)  # type: ignore[union-attr]
        seq.n_cached += n_acc
        if n_acc < k:
            self.ctx.drop_tail(seq.slot, seq.n_cached)
        for tok in [*draft.tokens[:n_acc], nxt]:
            self._on_token(seq, tok)
            if seq not in self._live:
                break

    def _apply_adapter(self, name: str | None) -> None:
        before = self.ctx._adapters
        self.ctx.set_adapters([self.adapters[name]] if name else [])
        if self._m and self.ctx._adapters != before:
            self._m["adapter_switches"].inc()

    def _on_token(self, seq: Sequence, token: int, logprobs=None, *, replayed: bool = False) -> None:
        if self.model.is_eog(token):
            self._finish(seq, "stop")
            return
        now = time.perf_counter()
        seq.tokens.append(token)
        text = seq.assembler.feed(self.model.piece(token))
        if self._m:
            self._m["tokens"].inc()
            if seq.t_first is None:
                self._m["ttft"].observe(now - seq.t_arrival)
            else:
                self._m["inter_token"].observe(now - seq.t_last)
        if seq.t_first is None:
            seq.t_first = now
            if self._prefix is not None:
                self._prefix.on_first_token(seq, now - seq.t_arrival)
        seq.t_last = now
        self._emit(seq, TokenEvent(token, text, logprobs, replayed))
        if seq.assembler.stopped:
            self._finish(seq, "stop")
        elif seq.n_generated >= seq.params.max_tokens or len(seq.tokens) >= self.ledger.capacity_cells:
            self._finish(seq, "length")

    def _finish(self, seq: Sequence, reason: str, *, removed: bool = False) -> None:
        self._release_followers(seq)
        if not removed:
            slot = self.scheduler.remove(seq)
            if slot is not None and slot >= 0:
                self.ctx.drop_seq(slot)
        self._live.discard(seq)
        if self._speculator is not None:
            self._speculator.release(seq)
        tail = seq.assembler.flush() if reason != "cancelled" else ""
        if tail:
            self._emit(seq, TokenEvent(-1, tail))
        now = time.perf_counter()
        if self._m:
            self._m["request_latency"].observe(now - seq.t_arrival)
            self._metrics.requests.labels(model=self.name, finish_reason=reason).inc()
        self._emit(
            seq,
            DoneEvent(
                finish_reason=reason,
                text=seq.assembler.text,
                prompt_tokens=len(seq.prompt),
                completion_tokens=seq.n_generated,
                ttft_s=None if seq.t_first is None else seq.t_first - seq.t_arrival,
                total_s=now - seq.t_arrival,
                queue_s=None if seq.t_admitted is None else seq.t_admitted - seq.t_arrival,
                preemptions=seq.preemptions,
                cached_tokens=seq.prefix_restored,
                prompt_logprobs=tuple(seq.prompt_scores) if seq.params.prompt_logprobs is not None else None,
            ),
        )

    def _fail(self, seq: Sequence, code: str, message: str) -> None:
        self._release_followers(seq)
        slot = self.scheduler.remove(seq)
        if slot is not None and slot >= 0:
            self.ctx.drop_seq(slot)
        self._live.discard(seq)
        if self._speculator is not None:
            self._speculator.release(seq)
        self._emit(seq, ErrorEvent(code, message))

    def _fail_running(self, code: str, message: str) -> None:
        for seq in list(self.scheduler.running):
            self._fail(seq, code, message)

    def _emit(self, seq: Sequence, event: Event) -> None:
        self._outbox.append((seq.sink, event))

    def _flush(self) -> None:
        if self._outbox:
            out, self._outbox = self._outbox, []
            deliver(out)

    def _update_gauges(self) -> None:
        if not self._m:
            return
        running, queued = len(self.scheduler.running), self.scheduler.n_waiting
        self._m["running"].set(running)
        self._m["queued"].set(queued)
        self._m["pending"].set(running + queued)
        self._m["kv_pages_used"].set(self.ledger.used_pages)
        self._m["kv_pages_free"].set(self.ledger.free_pages)

    def _drain_on_close(self) -> None:
        with self._cv:
            ops = list(self._inbox)
            self._inbox.clear()
        for op in ops:
            if op[0] == "add":
                self._live.add(op[1])
            elif op[0] == "call" and op[2].set_running_or_notify_cancel():
                op[2].set_exception(EngineClosed("engine stopped"))
        for seq in list(self._live):
            self._fail(seq, "unavailable", "the engine stopped")
