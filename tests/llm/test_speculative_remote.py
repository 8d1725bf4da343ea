"""Spec: the verify shard's draft-shard client and the settings that choose it (no model needed)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from themis_shard.cluster.transport.breaker import CircuitBreaker
from themis_shard.llm.sampling import SamplingParams
from themis_shard.llm.settings import LLMSettings
from themis_shard.llm.speculative.drafts import DraftUnavailable
from themis_shard.llm.speculative.remote import DraftTarget, RemoteDraft

# a port nothing listens on (connect is refused at once on loopback)
DEAD = "http://127.0.0.1:9"


def test_remote_source_needs_somewhere_to_draft() -> None:
    with pytest.raises(ValidationError, match="draft_url"):
        LLMSettings(speculative_source="remote")
    with pytest.raises(ValidationError, match="draft_model_path"):
        LLMSettings(speculative_source="local")
    with pytest.raises(ValidationError):
        LLMSettings(speculative_source="medusa")
    assert LLMSettings(speculative_source="remote", draft_shard="auto").draft_shard == "auto"


def test_no_draft_shard_known_means_plain_decoding() -> None:
    src = RemoteDraft(lambda: None)
    with pytest.raises(DraftUnavailable, match="no draft shard"):
        src.propose("seq", [1, 2, 3], 4, SamplingParams())


def test_failures_feed_the_clusters_breaker_and_an_open_breaker_costs_no_call() -> None:
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=2, recovery_s=60, clock=lambda: now[0])
    calls = []

    def resolve() -> DraftTarget:
        calls.append(1)
        return DraftTarget(DEAD, peer="s1", breaker=breaker)

    src = RemoteDraft(resolve, timeout_s=1.0)
    for _ in range(2):
        with pytest.raises(DraftUnavailable, match="s1"):
            src.propose("seq", [1, 2, 3], 4, SamplingParams())
    assert breaker.consecutive_failures == 2
    with pytest.raises(DraftUnavailable, match="circuit open"):  # refused locally: no connect
        src.propose("seq", [1, 2, 3], 4, SamplingParams())
    assert breaker.consecutive_failures == 2  # nothing was attempted, so nothing failed
    assert len(calls) == 3  # the target is re-resolved every round (the choice can change)
    src.close()
