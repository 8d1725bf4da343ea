"""Two-phase-commit settings (pydantic-settings, env prefix ``THEMIS_TXN_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class TxnSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_TXN_", extra="ignore")

    #: A prepared intent waits this long for its coordinator's decision; after it, its
    #: participant fences the transaction's deciders and an undecided transaction aborts.
    timeout_s: float = Field(10.0, gt=0)
    #: Participants ask the coordinator about prepared intents older than this.
    resolve_after_s: float = Field(2.0, ge=0)
    #: How often in-doubt intents are resolved and logged commits re-driven.
    resolve_interval_s: float = Field(1.0, gt=0)
    #: Finished decisions (aborts, fully acknowledged commits) are kept this long, then pruned.
    log_retention_s: float = Field(3600.0, gt=0)
    #: Budget of one prepare, commit, abort or decision call to a peer.
    call_timeout_s: float = Field(10.0, gt=0)
    #: Fault injection, off by default: the coordinator sleeps this long after every participant
    #: prepared and before it logs the decision (the e2e kills shards in this window).
    pause_after_prepare_s: float = Field(0.0, ge=0)
    #: Fault injection, off by default: the coordinator sleeps this long once COMMIT is final on
    #: a decider, before it logs the decision itself and runs phase 2.
    pause_after_decision_s: float = Field(0.0, ge=0)

    @property
    def in_doubt_bound_s(self) -> float:
        """Every in-doubt intent whose deciders answer is settled this long after its prepare:
        the timeout, then at most one resolve round, one call to each decider (in parallel) and
        one to the coordinator."""
        return self.timeout_s + self.resolve_interval_s + 2 * self.call_timeout_s
