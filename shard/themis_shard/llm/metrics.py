"""Prometheus metrics of the inference engine, registered on the shard's registry.

Names follow ARCHITECTURE.md §4 (and the dashboard panels): histograms for TTFT, inter-token and
queue time, gauges for the scheduler state, counters for tokens and preemptions. Labelled by
model alias so several loaded models stay apart.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class LLMMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.ttft = Histogram(
            "themis_llm_ttft_seconds", "Time to first token", ["model"], buckets=TTFT_BUCKETS, registry=r
        )
        self.inter_token = Histogram(
            "themis_llm_inter_token_seconds",
            "Time between consecutive tokens",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.queue = Histogram(
            "themis_llm_queue_seconds",
            "Time from arrival to admission",
            ["model"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.request_latency = Histogram(
            "themis_llm_request_seconds", "Arrival to last token", ["model"], buckets=TTFT_BUCKETS, registry=r
        )
        self.extra_buffer_types = Gauge(
            "themis_llm_extra_buffer_types",
            "1 when a model runs with llama.cpp's extra CPU buffer types (weight repacking)",
            ["model"],
            registry=r,
        )
        self.cpu_fallback = Gauge(
            "themis_llm_cpu_probe_fallback",
            "1 when the start-up probe crashed with extra buffer types and the model fell back",
            ["model"],
            registry=r,
        )
        self.tokens = Counter("themis_llm_tokens_generated_total", "Tokens generated", ["model"], registry=r)
        self.prompt_tokens = Counter(
            "themis_llm_prompt_tokens_total",
            "Prompt tokens prefilled (incl. recompute)",
            ["model"],
            registry=r,
        )
        self.requests = Counter(
            "themis_llm_requests_total",
            "Finished requests by finish reason",
            ["model", "finish_reason"],
            registry=r,
        )
        self.rejected = Counter(
            "themis_llm_rejected_requests_total", "Requests refused (queue full)", ["model"], registry=r
        )
        self.batch_size = Histogram(
            "themis_llm_batch_size",
            "Sequences per engine iteration",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.batch_tokens = Histogram(
            "themis_llm_batch_tokens",
            "Tokens per engine iteration",
            ["model"],
            buckets=(1, 4, 16, 64, 256, 512, 1024, 2048, 4096, 8192),
            registry=r,
        )
        self.running = Gauge(
            "themis_llm_running_sequences", "Sequences holding a KV slot", ["model"], registry=r
        )
        self.pending = Gauge(
            "themis_pending_llm_requests", "Requests queued or running (not finished)", ["model"], registry=r
        )
        self.queued = Gauge(
            "themis_llm_queued_requests", "Requests waiting for admission", ["model"], registry=r
        )
        self.kv_pages_used = Gauge(
            "themis_llm_kv_pages_used", "PagedKVCache pages held", ["model"], registry=r
        )
        self.kv_pages_free = Gauge(
            "themis_llm_kv_pages_free", "PagedKVCache pages free", ["model"], registry=r
        )
        self.preemptions = Counter(
            "themis_llm_preemptions_total", "Sequences preempted for recompute", ["model"], registry=r
        )
        self.active_adapters = Gauge("themis_active_lora_adapters", "LoRA adapters resident", registry=r)
        self.adapter_switches = Counter(
            "themis_llm_adapter_switches_total",
            "Iterations that changed the applied LoRA set",
            ["model"],
            registry=r,
        )
        self.embed_latency = Histogram(
            "themis_llm_embed_seconds", "Embedding call latency", buckets=TTFT_BUCKETS, registry=r
        )
        self.embedded_texts = Counter("themis_llm_embedded_texts_total", "Texts embedded", registry=r)
        # KV-prefix cache (prefix_cache.py / kv_blob.py).
        self.kv_prefix_hits = Counter(
            "themis_kv_prefix_hits_total", "Requests whose prompt prefix was restored", ["model"], registry=r
        )
        self.kv_prefix_misses = Counter(
            "themis_kv_prefix_misses_total", "Requests with no cached prompt prefix", ["model"], registry=r
        )
        self.kv_prefix_saved_tokens = Counter(
            "themis_kv_prefix_saved_prefill_tokens_total",
            "Prompt tokens restored instead of prefilled",
            ["model"],
            registry=r,
        )
        self.kv_prefix_saved_states = Counter(
            "themis_kv_prefix_states_saved_total", "Prefix states saved into the cache", ["model"], registry=r
        )
        self.kv_prefix_restore_seconds = Histogram(
            "themis_kv_prefix_restore_seconds",
            "Loading one prefix state into a sequence",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.kv_prefix_ttft = Histogram(
            "themis_kv_prefix_ttft_seconds",
            "Time to first token of prompts long enough for the prefix cache, by hit",
            ["model", "hit"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.kv_prefix_transfers = Counter(
            "themis_kv_prefix_transfers_total",
            "Prefix states moved between shards (direction: export|import; outcome: ok|refused)",
            ["model", "direction", "outcome"],
            registry=r,
        )
        self.kv_prefix_transfer_bytes = Counter(
            "themis_kv_prefix_transfer_bytes_total",
            "Bytes of prefix states moved between shards",
            ["model", "direction"],
            registry=r,
        )
        self.kv_prefix_cache_bytes = Gauge(
            "themis_kv_prefix_cache_bytes", "Bytes of prefix states held in RAM", ["model"], registry=r
        )
        # Speculative decoding (accept rate in PromQL: accepted / draft).
        spec_labels = ["model", "source"]
        self.spec_draft_tokens = Counter(
            "themis_speculation_draft_tokens_total", "Draft tokens verified", spec_labels, registry=r
        )
        self.spec_accepted_tokens = Counter(
            "themis_speculation_accepted_tokens_total", "Draft tokens accepted", spec_labels, registry=r
        )
        self.spec_fallback = Counter(
            "themis_speculation_fallback_total",
            "Rounds that fell back to plain decoding (low_acceptance, slow_draft, draft_error)",
            [*spec_labels, "reason"],
            registry=r,
        )
        self.draft_roundtrip = Histogram(
            "themis_draft_roundtrip_seconds",
            "Time to obtain one round's draft",
            spec_labels,
            buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
            registry=r,
        )
        self.spec_n_draft = Histogram(
            "themis_speculation_n_draft",
            "Draft length chosen per speculative round (0 = plain decoding)",
            spec_labels,
            buckets=(0, 1, 2, 3, 4, 6, 8, 12, 16),
            registry=r,
        )

    def for_engine(self, model: str) -> dict:
        """The engine's metrics, labelled with its model once (the hot path looks them up by name)."""
        return {
            k: getattr(self, k).labels(model=model)
            for k in (
                "ttft",
                "inter_token",
                "queue",
                "request_latency",
                "tokens",
                "prompt_tokens",
                "batch_size",
                "batch_tokens",
                "running",
                "pending",
                "queued",
                "kv_pages_used",
                "kv_pages_free",
                "preemptions",
                "rejected",
                "adapter_switches",
            )
        }
