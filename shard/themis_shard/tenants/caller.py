"""Who is asking, for the parts that act on a request's behalf inside the process (AQL's
inference): the API key's role (None when keys are off) and its tenant."""

from __future__ import annotations

from dataclasses import dataclass

from themis_core.access_policy import Role
from themis_core.tenant_policy import DEFAULT_TENANT


@dataclass(frozen=True)
class Caller:
    role: Role | None = None
    tenant: str = DEFAULT_TENANT
