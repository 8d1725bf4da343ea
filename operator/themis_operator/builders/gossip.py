"""The gossip key: an HMAC secret every shard of one cluster shares (and no one else has).

Shards sign membership and adapter announcements with it (``THEMIS_CLUSTER_GOSSIP_SECRET``).
It is generated once and then reused, so reconciling never splits a running cluster.
"""

from __future__ import annotations

import base64
import secrets

from .. import names
from .context import ClusterContext

KEY = "secret"


def build_gossip_secret(ctx: ClusterContext, existing: dict | None) -> dict:
    value = ((existing or {}).get("data") or {}).get(KEY)
    if not value:
        value = base64.b64encode(secrets.token_hex(32).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": ctx.metadata(names.gossip_secret(ctx.name), "gossip"),
        "data": {KEY: value},
    }
