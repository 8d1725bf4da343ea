"""Speculative decoding: drafts verified exactly inside the continuous-batching engine.

| module | concept |
|---|---|
| ``rejection.py`` | the exact acceptance rule (pure): u < p/q, residual norm(max(0, p − q)), sparse q |
| ``drafts.py`` | ``DraftSource`` protocol; ``PromptLookup`` (n-grams of the request's own context) |
| ``local_draft.py`` | ``LocalDraftModel``: a smaller GGUF in its own context on this shard |
| ``remote.py`` | ``RemoteDraft`` (client) and ``DraftService`` (``/internal/draft`` server side) |
| ``adaptive.py`` | cost model + per-position acceptance → n_draft maximising tokens/s; fallback |
| ``speculator.py`` | the engine hook: draft before the batch, verify after the decode, metrics |
| ``factory.py`` | builds an engine's speculator from ``LLMSettings`` |

The draft model file itself comes from ``llm/tools/draft_model.py`` (first k layers of a GGUF).
"""
