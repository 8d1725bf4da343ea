"""Authentication settings (env prefix ``THEMIS_AUTH_``).

Off by default, which is the local ``themis up`` mode; the Helm chart and the operator turn it
on and mount a Secret of hashed keys (``THEMIS_AUTH_KEYS_FILE``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from themis_core.api_keys import KeyRing, parse_entries
from themis_core.tenant_policy import TenantPolicy, parse_policies


class AuthSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="THEMIS_AUTH_", extra="ignore")

    enabled: bool = False
    #: File of ``<role> sha256:<hex> [name] [tenant=<t>]`` lines and ``tenant <t> [limit=value ...]``
    #: lines (a Secret's mount); re-read on each start.
    keys_file: Path | None = None
    #: The same entries inline (lines or ``;``-separated), added to the file's.
    keys: str = ""
    #: Serve ``/metrics`` without a key (Prometheus scrapes inside the cluster); false: client role.
    metrics_open: bool = True
    #: Serve ``/openapi.json``, ``/docs`` and ``/redoc`` without a key; false: any valid key
    #: (the schema names every route, the admin ones included).
    docs_open: bool = False
    #: The realm named in ``WWW-Authenticate``.
    realm: str = Field("themis", pattern=r"^[A-Za-z0-9_.-]{1,64}$")

    @model_validator(mode="after")
    def _keys_when_enabled(self) -> AuthSettings:
        if self.enabled and self.keys_file is None and not self.keys.strip():
            raise ValueError("THEMIS_AUTH_ENABLED needs THEMIS_AUTH_KEYS_FILE or THEMIS_AUTH_KEYS")
        if self.keys_file is not None and self.enabled and not self.keys_file.is_file():
            raise ValueError(f"THEMIS_AUTH_KEYS_FILE {self.keys_file} does not exist")
        parse_entries(self.keys, source="THEMIS_AUTH_KEYS")  # refuse a malformed entry at start-up
        parse_policies(self.keys, source="THEMIS_AUTH_KEYS")
        return self

    def _texts(self) -> list[tuple[str, str]]:
        texts = [(self.keys, "THEMIS_AUTH_KEYS")]
        if self.keys_file is not None:
            texts.append((self.keys_file.read_text(), str(self.keys_file)))
        return texts

    def tenant_policies(self) -> dict[str, TenantPolicy]:
        """The ``tenant`` lines of the inline keys and the keys file; a tenant twice is an error."""
        out: dict[str, TenantPolicy] = {}
        for text, source in self._texts():
            for name, policy in parse_policies(text, source=source).items():
                if name in out:
                    raise ValueError(f"{source}: tenant {name!r} is declared twice")
                out[name] = policy
        return out

    def key_ring(self) -> KeyRing:
        entries = [e for text, source in self._texts() for e in parse_entries(text, source=source)]
        if self.enabled and not entries:
            raise ValueError("authentication is enabled but no API key is configured")
        return KeyRing(entries)
