"""LLMRuntime: the shard's facade over its models, engines, adapters and embedder.

The shard app creates one per process, awaits ``start()`` in its lifespan, and handlers reach it
as ``request.app.state.llm``. What it needs from the cluster comes in through the constructor as
the Protocols of ``hooks.py`` (``prefix_puller``, ``draft_resolver``), so ``llm/`` never imports
the cluster. Everything slow (loading, fingerprinting, converting the embedding model) runs in a
worker thread so the event loop stays free; ``ready`` turns True once every configured model
serves.

Why one ~580-line module: it is the one facade whose start and stop order the models, engines,
adapters, embedder and draft service, each of which is a module of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
from prometheus_client import CollectorRegistry

from ..errors import BadRequest, NotFound, ThemisError, Unavailable
from .chat_template import ChatTemplate, ChatTemplateError
from .compute_threads import oversubscription
from .cpu_probe import BufferDecision, BufferPolicy, default_cache_dir
from .embeddings import Embedder, load_embedder
from .engine import Engine, EngineClosed, EngineConfig, QueueFull
from .generation import Generation, GenerationFailed, generation_result
from .grammar import GrammarConstraint, GrammarError
from .hooks import CoreShare
from .loaded import LoadedModel
from .lora import AdapterManager, ValidationSets
from .metrics import LLMMetrics
from .model import fingerprint, resolve_model_path
from .native import NativeModel
from .prefix_hook import build_for as build_prefix_hook
from .sampling import SamplingError, SamplingParams, generation_budget
from .scheduler import Limits
from .seams import PrefixPuller
from .sequence import ErrorEvent, Sequence
from .settings import LLMSettings
from .speculative.factory import build_for as build_speculator
from .speculative.local_draft import LocalDraftModel
from .speculative.remote import DraftResolver, DraftService, DraftTarget

log = logging.getLogger(__name__)


def engine_config(s: LLMSettings) -> EngineConfig:
    return EngineConfig(
        n_ctx=s.n_ctx,
        n_threads=s.n_threads or (os.cpu_count() or 1),
        n_ubatch=s.n_ubatch,
        page_size=s.kv_page_size,
        max_queue=s.max_queue,
        limits=Limits(
            max_running=s.max_concurrent_requests,
            max_batch_size=s.max_batch_size,
            max_tokens_per_batch=s.max_tokens_per_batch,
            chunk=s.chunked_prefill_size,
            mix_prefill_tokens=None if s.mix_prefill_tokens < 0 else s.mix_prefill_tokens,
        ),
    )


class LLMRuntime:
    def __init__(
        self,
        settings: LLMSettings,
        registry: CollectorRegistry | None = None,
        *,
        prefix_puller: PrefixPuller | None = None,
        draft_resolver: DraftResolver | None = None,
        validation_sets: ValidationSets | None = None,
        cores: CoreShare | None = None,
    ) -> None:
        """``prefix_puller``: pull-on-miss of KV prefixes peers hold (None: local cache only).
        ``draft_resolver``: the draft shard for ``speculative_source=remote`` with
        ``draft_shard`` (a shard id or "auto"); a fixed ``draft_url`` needs none. ``cores``: the
        host's cores shared by demand with other shards' engines (None: ``n_threads`` each)."""
        self.settings = settings
        #: each adapter's held-out set (its domain's), for its evaluation
        self.validation_sets = validation_sets
        self.metrics = LLMMetrics(registry or CollectorRegistry())
        self.models: dict[str, LoadedModel] = {}
        self.embedder: Embedder | None = None
        self.ready = False
        self.error: str | None = None
        self._prefix_puller = prefix_puller
        self._draft_resolver = draft_resolver
        self._cores = cores
        self._draft_service: DraftService | None = None  # /internal/draft, loaded on first use
        self._draft_lock = threading.Lock()
        #: How each model was loaded on this CPU (alias, or "embedding:<name>") — /health shows it.
        self.buffers: dict[str, BufferDecision] = {}
        self._templates: dict[str, ChatTemplate] = {}
        self.buffer_policy = BufferPolicy(
            settings.extra_buffer_types,
            Path(settings.probe_cache_dir).expanduser() if settings.probe_cache_dir else default_cache_dir(),
            settings.probe_fault,
        )

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self._load_models)
            await self._load_adapters()
            await asyncio.to_thread(self._load_embedder)
            if self.settings.serve_drafts:
                await asyncio.to_thread(self.draft_service)
        except Exception as exc:
            self.error = str(exc)
            log.exception("LLM runtime failed to start")
            raise
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        models, self.models = self.models, {}
        for m in models.values():
            await asyncio.to_thread(m.engine.stop)
            m.adapters.close()
            m.native.close()
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None
        svc, self._draft_service = self._draft_service, None
        if svc is not None:
            svc.source.close()
        for m in models.values():
            if m.speculator is not None:
                m.speculator.close()

    def _load_models(self) -> None:
        s = self.settings
        for alias, path in {s.model_alias: s.model_path, **s.extra_models}.items():
            file = resolve_model_path(path)
            buffers = self._buffers_for(alias, file)
            native = NativeModel(file, n_gpu_layers=s.n_gpu_layers, use_extra_bufts=buffers.use_extra_bufts)
            fp = fingerprint(file, native.meta)
            config = engine_config(s)
            prefix = build_prefix_hook(native, config, alias, fp, s, self.metrics) if s.prefix_cache else None
            speculator = None
            if s.speculative_source != "none":
                speculator = build_speculator(
                    config,
                    native,
                    s,
                    self.metrics,
                    alias,
                    resolve_draft=self.draft_target,
                    cache_dir=self.buffer_policy.cache_dir,
                )
            engine = Engine(
                native,
                config,
                name=alias,
                metrics=self.metrics,
                prefix=prefix,
                speculator=speculator,
                cores=self._cores,
            )
            engine.start()
            self.models[alias] = LoadedModel(
                alias,
                native,
                engine,
                fp,
                AdapterManager(engine, native, fp.architecture, s, self.metrics, self.validation_sets),
                prefix=prefix,
                speculator=speculator,
                created=int(time.time()),
            )
            log.info(
                "model %s ready: %s %s sha256=%s", alias, fp.architecture, fp.quantisation, fp.sha256[:12]
            )
        warning = oversubscription(len(self.models), engine_config(s).n_threads, os.cpu_count() or 1)
        if warning:
            log.warning(warning)

    # -- speculative decoding across shards ------------------------------------------------------

    def draft_target(self) -> DraftTarget | None:
        """Where this shard's drafts come from now: the fixed URL, else the cluster's choice."""
        if self.settings.draft_url:
            return DraftTarget(self.settings.draft_url)
        return self._draft_resolver() if self._draft_resolver is not None else None

    def draft_service(self) -> DraftService:
        """The ``/internal/draft`` server side, loading its draft model on first use: the
        configured ``draft_model_path``, else this shard's own model (a small model serving as
        a bigger one's draft)."""
        with self._draft_lock:
            if self._draft_service is None:
                s = self.settings
                src = LocalDraftModel.open(
                    s.draft_model_path or s.model_path,
                    n_ctx=s.n_ctx,
                    n_threads=s.n_threads or (os.cpu_count() or 1),
                )
                if src.info is None:  # the model itself: it drafts for its own fingerprint
                    m = self.models.get(s.model_alias)
                    src.info = {"of_sha256": m.fingerprint.sha256 if m else ""}
                # Drafts are computed on the engine's thread (one OpenMP pool: ``compute_threads``).
                m = self.models.get(s.model_alias)
                self._draft_service = DraftService(src, runner=m.engine.call if m else None)
            return self._draft_service

    @property
    def loaded_draft_service(self) -> DraftService | None:
        """The draft service if it was ever loaded (releasing state must not load a model)."""
        return self._draft_service

    @property
    def draft_of(self) -> str:
        """sha256 of the model this shard drafts for, announced through gossip; "" = none."""
        svc = self._draft_service
        if not self.settings.serve_drafts or svc is None or not svc.source.info:
            return ""
        return str(svc.source.info.get("of_sha256") or "")

    async def _load_adapters(self) -> None:
        default = self.models[self.settings.model_alias].adapters
        for name, path in self.settings.adapters.items():
            await default.load(name, path, domain=None)

    def _load_embedder(self) -> None:
        # Encoding runs on the first engine's thread where there is one: one OpenMP pool, not two.
        engine = next(iter(self.models.values())).engine if self.models else None
        self.embedder = load_embedder(
            self.settings,
            self.metrics,
            lambda name, path: self._buffers_for(f"embedding:{name}", path, True),
            runner=engine.call if engine is not None else None,
        )

    def _buffers_for(self, name: str, path, embedding: bool = False) -> BufferDecision:
        gpu = self.settings.n_gpu_layers
        decision = self.buffer_policy.for_model(path, n_gpu_layers=gpu, embedding=embedding)
        if decision.fallback:
            log.warning("%s: %s", name, decision.reason)
        self.buffers[name] = decision
        self.metrics.extra_buffer_types.labels(name).set(int(decision.use_extra_bufts))
        self.metrics.cpu_fallback.labels(name).set(int(decision.fallback))
        return decision

    # -- generation ------------------------------------------------------------------------------

    def model(self, alias: str | None) -> LoadedModel:
        if not self.ready and not self.models:
            raise Unavailable("the LLM runtime is not ready", code="llm_not_ready")
        key = alias or self.settings.model_alias
        m = self.models.get(key)
        if m is None:
            raise NotFound(f"unknown model {key!r}", code="model_not_found")
        return m

    def tokenize_prompt(self, m: LoadedModel, prompt: str, *, special: bool = False) -> list[int]:
        if not isinstance(prompt, str) or not prompt:
            raise BadRequest("prompt must be a non-empty string", code="empty_prompt")
        tokens = m.native.tokenize(prompt, parse_special=special)
        limit = m.engine.capacity_tokens - 1
        if len(tokens) > limit:
            raise BadRequest(
                f"prompt is {len(tokens)} tokens; this model's context holds {limit}",
                code="context_length_exceeded",
            )
        return tokens

    def check_tokens(self, m: LoadedModel, tokens: list[int]) -> list[int]:
        """A prompt given as token ids, checked as a text prompt is: llama.cpp aborts the whole
        process (std::out_of_range) on an id outside the vocabulary, so none may reach it."""
        if not tokens:
            raise BadRequest("prompt must not be empty", code="empty_prompt")
        n_vocab = m.native.n_vocab
        bad = next((t for t in tokens if not isinstance(t, int) or not 0 <= t < n_vocab), None)
        if bad is not None:
            raise BadRequest(f"token id {bad} is outside the vocabulary [0, {n_vocab})", code="invalid_token")
        limit = m.engine.capacity_tokens - 1
        if len(tokens) > limit:
            raise BadRequest(
                f"prompt is {len(tokens)} tokens; this model's context holds {limit}",
                code="context_length_exceeded",
            )
        return tokens

    def sampling(
        self,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        min_p: float | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        repetition_penalty: float | None = None,
        logit_bias: dict[int, float] | None = None,
        logprobs: int | None = None,
        grammar: str | None = None,
        prompt_logprobs: int | None = None,
        model: str | None = None,
        default_max_tokens: int | None = None,
    ) -> SamplingParams:
        """Validated parameters; ``model`` (its vocabulary) bounds ``logit_bias`` token ids.
        ``default_max_tokens``: the route's own default when the request sets none (legacy
        completions: OpenAI's 16), lowered to the limit like the shard's default."""
        if isinstance(stop, str):
            stop = [stop]
        max_tokens = generation_budget(
            max_tokens, default_max_tokens or self.settings.default_max_tokens, self.settings.max_tokens_limit
        )
        n_vocab = self.model(model).native.n_vocab if logit_bias else 2**31
        if grammar is not None:  # compiled once here so a bad grammar is a 400 on every path
            native = self.model(model).native
            try:
                GrammarConstraint(native.vocab, native.n_vocab, grammar).close()
            except GrammarError as exc:
                raise BadRequest(str(exc), code="invalid_grammar") from exc
        try:
            return SamplingParams(
                max_tokens=max_tokens,
                temperature=0.0 if temperature is None else float(temperature),
                top_p=1.0 if top_p is None else float(top_p),
                top_k=top_k or 0,
                seed=seed,
                stop=tuple(stop or ()),
                min_p=min_p or 0.0,
                presence_penalty=presence_penalty or 0.0,
                frequency_penalty=frequency_penalty or 0.0,
                repetition_penalty=1.0 if repetition_penalty is None else float(repetition_penalty),
                logit_bias=tuple(sorted((int(k), float(v)) for k, v in (logit_bias or {}).items())),
                logprobs=logprobs,
                grammar=grammar,
                prompt_logprobs=prompt_logprobs,
            ).validate(max_stop_strings=self.settings.max_stop_strings, n_vocab=n_vocab)
        except SamplingError as exc:
            raise BadRequest(str(exc), code="invalid_sampling") from exc

    @contextlib.contextmanager
    def _engine_errors(self) -> Iterator[None]:
        """The engine's refusals as API errors: one mapping for single and grouped submits."""
        try:
            yield
        except QueueFull as exc:
            raise ThemisError(
                f"inference queue is full ({exc})",
                code="queue_full",
                status=429,
                headers={"Retry-After": str(self.settings.retry_after_s)},
            ) from exc
        except EngineClosed as exc:
            raise Unavailable(str(exc), code="llm_not_ready") from exc
        except GrammarError as exc:
            raise BadRequest(str(exc), code="invalid_grammar") from exc

    def submit(
        self,
        *,
        prompt: str | None = None,
        tokens: list[int] | None = None,
        model: str | None = None,
        adapter: str | None = None,
        domain: str | None = None,
        params: SamplingParams | None = None,
        priority: int = 0,
        special: bool = False,
        speculative: bool | None = None,
        shared_prefix_chars: int | None = None,
    ) -> Generation:
        """Queue one generation; raises ThemisError (4xx/429/503) for anything it cannot serve.
        ``speculative`` None: the shard's ``speculative_default``. ``shared_prefix_chars``: the
        prompt's first characters that other requests share (the KV-prefix cache saves there)."""
        m = self.model(model)
        if speculative and params is not None and not params.plain:
            raise BadRequest(
                "speculative cannot be combined with penalties, min_p, logit_bias, logprobs or a "
                "grammar (response_format, tools)",
                code="unsupported_parameter",
            )
        if speculative is None:
            speculative = self.settings.speculative_default
        shared = 0
        if tokens is None:
            tokens = self.tokenize_prompt(m, prompt or "", special=special)
            if shared_prefix_chars:
                head = m.native.tokenize((prompt or "")[:shared_prefix_chars], parse_special=special)
                shared = common_prefix(head, tokens)
        else:
            tokens = self.check_tokens(m, tokens)
        adapter_name = m.adapters.resolve(adapter, domain)
        gen = Generation(asyncio.get_running_loop())
        gen.model, gen.adapter = m.alias, adapter_name
        pull = None
        if self._prefix_puller is not None and adapter_name is None:
            pull = self._prefix_puller.plan(m, tokens)
        if pull is not None:  # a peer holds a longer KV prefix and pulling it beats prefilling
            p = params or self.sampling()
            return submit_after(
                gen,
                pull,
                lambda: m.engine.submit(
                    tokens,
                    p,
                    gen.sink,
                    adapter=adapter_name,
                    priority=priority,
                    speculative=speculative,
                    shared_prefix=shared,
                ),
                m.engine.cancel,
            )
        with self._engine_errors():
            seq = m.engine.submit(
                tokens,
                params or self.sampling(),
                gen.sink,
                adapter=adapter_name,
                priority=priority,
                speculative=speculative,
                shared_prefix=shared,
            )
        gen.bind(seq, lambda: m.engine.cancel(seq))
        return gen

    def submit_n(
        self,
        n: int,
        *,
        prompt: str | None = None,
        tokens: list[int] | None = None,
        model: str | None = None,
        adapter: str | None = None,
        domain: str | None = None,
        params: SamplingParams | None = None,
        priority: int = 0,
        special: bool = False,
        speculative: bool | None = None,
    ) -> list[Generation]:
        """``n`` generations of one prompt (OpenAI's ``n``) with one prefill: the engine copies
        the first sequence's cells to the others. Each has its own sampler (a seed s gives the
        sequences s, s+1, ...)."""
        if n == 1:
            return [
                self.submit(
                    prompt=prompt,
                    tokens=tokens,
                    model=model,
                    adapter=adapter,
                    domain=domain,
                    params=params,
                    priority=priority,
                    special=special,
                    speculative=speculative,
                )
            ]
        m = self.model(model)
        params = params or self.sampling()
        if speculative:
            raise BadRequest("speculative cannot be combined with n > 1", code="unsupported_parameter")
        if tokens is None:
            tokens = self.tokenize_prompt(m, prompt or "", special=special)
        else:
            tokens = self.check_tokens(m, tokens)
        adapter_name = m.adapters.resolve(adapter, domain)
        loop = asyncio.get_running_loop()
        gens = [Generation(loop) for _ in range(n)]
        each = [
            params if params.seed is None else replace(params, seed=(params.seed + i) % 2**53)
            for i in range(n)
        ]
        with self._engine_errors():
            seqs = m.engine.submit_group(
                tokens, each, [g.sink for g in gens], adapter=adapter_name, priority=priority
            )
        for g, seq in zip(gens, seqs, strict=True):
            g.model, g.adapter = m.alias, adapter_name
            g.bind(seq, functools.partial(m.engine.cancel, seq))
        return gens

    def count_embedding_tokens(self, texts: list[str]) -> int:
        if self.embedder is None:
            raise Unavailable("no embedding model is configured", code="embeddings_disabled")
        return sum(len(self.embedder.tokenize(t)) for t in texts)

    async def infer(
        self,
        prompt: str,
        *,
        model: str | None = None,
        adapter: str | None = None,
        domain: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        seed: int | None = None,
        stop: str | list[str] | None = None,
        priority: int = 0,
    ) -> dict:
        """One non-streamed generation for in-process callers (AQL ``INFER``, RAG): the /v1/infer
        result without ``shard_id``. Raises ThemisError like the route does."""
        params = self.sampling(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, stop=stop
        )
        gen = self.submit(
            prompt=prompt, model=model, adapter=adapter, domain=domain, params=params, priority=priority
        )
        try:
            done = await gen.result()
        except GenerationFailed as exc:
            raise ThemisError(exc.message, code=exc.code, status=503) from exc
        return generation_result(done, gen)

    def chat_template(self, model: str | None) -> ChatTemplate:
        """The model's own Jinja template, else its family's turn format (built once per model)."""
        m = self.model(model)
        t = self._templates.get(m.alias)
        if t is None:
            eos = m.native.eos_text()
            try:
                t = ChatTemplate.for_model(
                    m.native.chat_template(), m.native.meta("general.architecture") or "", eos
                )
            except ChatTemplateError as exc:
                raise BadRequest(str(exc), code="invalid_chat_template") from exc
            self._templates[m.alias] = t
        return t

    def apply_chat_template(
        self, model: str | None, messages: list[dict], tools: list[dict] | None = None
    ) -> str:
        """OpenAI-style messages (dicts: role, content, tool_calls, tool_call_id, name) → prompt."""
        try:
            return self.chat_template(model).render(messages, tools)
        except ChatTemplateError as exc:
            raise BadRequest(str(exc), code="invalid_chat_template") from exc

    # -- embeddings ------------------------------------------------------------------------------

    @property
    def embedding_dimension(self) -> int:
        if self.embedder is None:
            raise Unavailable("no embedding model is configured", code="embeddings_disabled")
        return self.embedder.dimension

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """L2-normalised embeddings, one per text (empty texts embed as the empty string)."""
        return (await self.embed_rows(texts)).tolist()

    async def embed_rows(self, texts: list[str]) -> np.ndarray:
        """:meth:`embed` as the model computes it: one float32 row per text."""
        if self.embedder is None:
            raise Unavailable("no embedding model is configured", code="embeddings_disabled")
        if len(texts) > self.settings.max_embed_texts:
            raise BadRequest(f"at most {self.settings.max_embed_texts} texts per call", code="too_many_texts")
        if any(not isinstance(t, str) for t in texts):
            raise BadRequest("texts must be strings", code="invalid_texts")
        if not texts:
            return np.zeros((0, self.embedder.dimension), np.float32)
        with self._engine_errors():  # encoding runs on the engine's thread, which may be stopping
            return await self.embedder.embed(texts)

    # -- introspection ---------------------------------------------------------------------------

    def describe(self) -> list[dict]:
        out = []
        for m in self.models.values():
            out.append(
                {
                    "id": m.alias,
                    "created": m.created,
                    "fingerprint": m.fingerprint.as_dict(),
                    "n_ctx": m.engine.ctx.n_ctx,
                    "engine": m.engine.stats(),
                    "adapters": [a.name for a in m.adapters.list()],
                }
            )
        return out


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share: a text's head tokenised alone may end in
    another token than inside the whole text (a merge across the cut), so only these count."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def submit_after(
    gen: Generation,
    first: Callable[[], Awaitable[None]],
    submit: Callable[[], Sequence],
    cancel: Callable[[Sequence], None],
) -> Generation:
    """Queue the request once ``first()`` finished, whether it succeeded or not (a failed
    KV-prefix pull only means a local prefill). Engine refusals become an ErrorEvent on ``gen``;
    a client that leaves before ``first()`` ends cancels the sequence as soon as it exists."""

    async def run() -> None:
        try:
            await first()
        except Exception:
            log.exception("prefix pull failed")
        try:
            seq = submit()
        except ThemisError as exc:
            gen.sink(ErrorEvent(exc.code, exc.message))
            return
        except Exception as exc:
            gen.sink(ErrorEvent("unavailable", str(exc)))
            return
        gen.bind(seq, lambda: cancel(seq))
        if cancelled:
            gen.cancel()

    cancelled = False
    task = asyncio.ensure_future(run())

    def early_cancel() -> None:
        nonlocal cancelled
        cancelled = True

    gen.bind(None, early_cancel)
    gen._pending = task
    return gen
