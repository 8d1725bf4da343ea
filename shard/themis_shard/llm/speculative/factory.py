"""Build an engine's ``Speculator`` from ``LLMSettings`` (the runtime's one entry point)."""

from __future__ import annotations

from ..settings import LLMSettings
from .adaptive import AdaptiveConfig
from .drafts import PromptLookup
from .speculator import Speculator


def adaptive_config(s: LLMSettings) -> AdaptiveConfig:
    return AdaptiveConfig(
        n_max=s.n_draft,
        adaptive=s.speculative_adaptive,
        min_acceptance=s.speculation_min_acceptance,
        cooldown=s.speculation_cooldown,
        max_draft_s=s.speculation_max_draft_s,
    )


def build_for(engine, native, s: LLMSettings, metrics, alias: str) -> Speculator | None:
    kind = s.speculative_source
    if kind == "none" or s.n_draft == 0:
        return None
    if kind == "prompt_lookup":
        source = PromptLookup(
            s.prompt_lookup_min_ngram, max(s.prompt_lookup_min_ngram, s.prompt_lookup_max_ngram)
        )
    elif kind == "local":
        from .local_draft import LocalDraftModel

        if not s.draft_model_path:
            raise ValueError("speculative_source=local needs THEMIS_LLM_DRAFT_MODEL_PATH")
        source = LocalDraftModel.open(
            s.draft_model_path, n_ctx=engine.config.n_ctx, n_threads=engine.config.n_threads
        )
    else:
        raise ValueError(f"unknown speculative_source {kind!r}")
    return Speculator(source, adaptive_config(s), metrics=metrics, model=alias)
