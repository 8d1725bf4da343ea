"""API keys for the local cluster (``themis up --auth``) and the key the CLI sends.

Keys are off by default in local mode. ``--auth`` mints an admin and a client key into
``.themis/auth/`` (each readable only by its owner), hands the shards only their SHA-256 digests
(``keys``, the same file a Kubernetes Secret mounts) and says where the keys are.
"""

from __future__ import annotations

import os
from pathlib import Path

from themis_core.access_policy import Role
from themis_core.api_keys import entry_for, new_key

ENV_KEY = "THEMIS_API_KEY"


def _write_private(path: Path, text: str) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(text)


def write_local_keys(state_dir: Path) -> dict[str, str]:
    """Mint the keys (kept across restarts) and return the shards' auth environment."""
    directory = state_dir / "auth"
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    for role in (Role.admin, Role.client):
        path = directory / f"{role.name}.key"
        if not path.exists():
            _write_private(path, new_key() + "\n")
        entries.append(entry_for(path.read_text().strip(), role, f"local-{role.name}").line())
    digests = directory / "keys"
    _write_private(
        digests, "# <role> sha256:<digest> [name]: what the shards hold\n" + "\n".join(entries) + "\n"
    )
    return {"THEMIS_AUTH_ENABLED": "true", "THEMIS_AUTH_KEYS_FILE": str(digests.resolve())}


def resolve_api_key(explicit: str | None, state_dir: Path) -> str | None:
    """The key the CLI sends: ``--api-key``, else ``$THEMIS_API_KEY``, else the local admin key."""
    if explicit:
        return explicit
    if os.environ.get(ENV_KEY):
        return os.environ[ENV_KEY]
    local = state_dir / "auth" / "admin.key"
    return local.read_text().strip() if local.exists() else None
