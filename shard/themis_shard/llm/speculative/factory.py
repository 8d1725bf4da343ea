"""Build an engine's ``Speculator`` from ``LLMSettings`` (the runtime's one entry point)."""

from __future__ import annotations

from pathlib import Path

from ..engine import EngineConfig
from ..native import NativeModel
from ..settings import LLMSettings
from .adaptive import AdaptiveConfig
from .calibration import VerifyCostTable, table_key
from .drafts import DraftSource, PromptLookup
from .local_draft import LocalDraftModel
from .remote import DraftResolver, RemoteDraft
from .speculator import Speculator


def adaptive_config(s: LLMSettings) -> AdaptiveConfig:
    return AdaptiveConfig(
        n_max=s.n_draft,
        adaptive=s.speculative_adaptive,
        min_acceptance=s.speculation_min_acceptance,
        cooldown=s.speculation_cooldown,
        max_draft_s=s.speculation_max_draft_s,
        max_batch=s.speculation_max_batch,
    )


def build_for(
    config: EngineConfig,
    native: NativeModel,
    s: LLMSettings,
    metrics,
    alias: str,
    *,
    resolve_draft: DraftResolver | None = None,
    cache_dir: Path | None = None,
) -> Speculator | None:
    """The speculator for engine ``alias`` (pass it as ``Engine(speculator=)``). ``resolve_draft``:
    for ``remote``, where to ask now (the runtime's, which knows the cluster); ``draft_url`` alone
    needs none. ``cache_dir``: where this machine's verify costs are kept (``calibration.py``)."""
    kind = s.speculative_source
    if kind == "none" or s.n_draft == 0:
        return None
    source: DraftSource
    if kind == "prompt_lookup":
        source = PromptLookup(
            s.prompt_lookup_min_ngram, max(s.prompt_lookup_min_ngram, s.prompt_lookup_max_ngram)
        )
    elif kind == "local":
        source = LocalDraftModel.open(s.draft_model_path, n_ctx=config.n_ctx, n_threads=config.n_threads)
    elif kind == "remote":
        source = RemoteDraft(resolve_draft or s.draft_url, timeout_s=s.speculation_max_draft_s)
    else:
        raise ValueError(f"unknown speculative_source {kind!r}")
    path = getattr(native, "path", None)
    size = path.stat().st_size if path else 0
    costs = None
    if path and s.speculation_calibrate:
        extra = bool(getattr(native, "use_extra_bufts", False))
        costs = VerifyCostTable(cache_dir, table_key(Path(path), config.n_threads, s.n_draft, extra))
    return Speculator(
        source, adaptive_config(s), metrics=metrics, model=alias, target_bytes=size, calibration=costs
    )
