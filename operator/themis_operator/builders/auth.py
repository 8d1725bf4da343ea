"""The API keys Secret: an admin, a client and the operator's own key, and their digests.

Users read ``admin.key`` / ``client.key`` from the Secret (``kubectl get secret NAME-api-keys``);
the shards mount only ``keys``, the SHA-256 digests (``THEMIS_AUTH_KEYS_FILE``); the operator
sends ``operator.key`` (role admin) when it asks shards for ``/v1/cluster/status``. Each tenant of
``spec.auth.tenants`` gets a client key ``tenant-NAME.key`` and its ``tenant NAME ...`` limits line
in ``keys``. Keys are minted once and then kept, so reconciling never rotates them under running
clients; a tenant removed from the spec loses its key.
"""

from __future__ import annotations

import base64

from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key
from themis_core.tenant_policy import TenantPolicy

from .. import names
from .context import ClusterContext

DIGESTS = "keys"
OPERATOR_KEY = "operator.key"
#: Secret item → the role of the key it holds.
KEYS = {"admin.key": Role.admin, "client.key": Role.client, OPERATOR_KEY: Role.admin}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def tenant_policies(ctx: ClusterContext) -> list[TenantPolicy]:
    return [
        TenantPolicy(t.name, t.requests_per_s, t.tokens_per_min, t.concurrency, t.max_priority, t.weight)
        for t in ctx.spec.auth.tenants
    ]


def tenant_item(tenant: str) -> str:
    return f"tenant-{tenant}.key"


def build_api_keys_secret(ctx: ClusterContext, existing: dict | None) -> dict:
    data = dict((existing or {}).get("data") or {})
    policies = tenant_policies(ctx)
    roles = {**KEYS, **{tenant_item(p.name): Role.client for p in policies}}
    keys = {
        item: base64.b64decode(data[item]).decode().strip() if data.get(item) else new_key() for item in roles
    }
    lines = [p.line() for p in policies]
    lines += [entry_for(keys[item], role, item.removesuffix(".key")).line() for item, role in KEYS.items()]
    lines += [entry_for(keys[tenant_item(p.name)], Role.client, p.name, p.name).line() for p in policies]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": ctx.metadata(names.api_keys_secret(ctx.name), "auth"),
        "data": {**{item: _b64(key) for item, key in keys.items()}, DIGESTS: _b64("\n".join(lines) + "\n")},
    }
