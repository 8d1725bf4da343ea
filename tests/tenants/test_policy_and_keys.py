"""Spec: tenants in the keys file — ``tenant=`` on a key line, ``tenant <name> limit=value`` lines,
the ``default`` tenant for keys without one, and every malformed line refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from themis_core.access_policy import Role
from themis_core.api_keys import KeyRing, entry_for, new_key, parse_entries
from themis_core.tenant_policy import TenantPolicy, parse_policies
from themis_shard.auth.settings import AuthSettings

ACME, OTHER = new_key(), new_key()


def test_a_key_line_names_its_tenant_and_a_key_without_one_is_default() -> None:
    text = f"{entry_for(ACME, Role.client, 'bench', 'acme').line()}\n{entry_for(OTHER, Role.admin).line()}"
    assert text.splitlines()[0].endswith(" bench tenant=acme")
    ring = KeyRing(parse_entries(text))
    assert ring.entry_of(ACME).tenant == "acme" and ring.role_of(ACME) is Role.client
    assert ring.entry_of(OTHER).tenant == "default"
    nameless = parse_entries(f"client {entry_for(ACME, Role.client).digest} tenant=acme")
    assert nameless[0].name == "" and nameless[0].tenant == "acme"


def test_tenant_lines_round_trip_and_are_not_keys() -> None:
    policy = TenantPolicy("acme", requests_per_s=5, tokens_per_min=6000, concurrency=2, max_priority=0)
    assert policy.line() == "tenant acme requests_per_s=5 tokens_per_min=6000 concurrency=2 max_priority=0"
    text = f"{policy.line()}\n{entry_for(ACME, Role.client, tenant='acme').line()}  # comment"
    assert parse_policies(text) == {"acme": policy}
    assert len(parse_entries(text)) == 1


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("tenant acme rps=5", "unknown tenant attribute 'rps=5'"),
        ("tenant acme concurrency=lots", "concurrency must be a number"),
        ("tenant acme tokens_per_min=0", "tokens_per_min must be > 0"),
        ("tenant Acme!", "tenant name 'Acme!'"),
        ("tenant acme\ntenant acme", "declared twice"),
        ("tenant acme max_priority=5000", "max_priority must be within"),
    ],
)
def test_a_malformed_tenant_line_is_refused_by_name(line: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_policies(line)


def test_auth_settings_refuse_a_bad_tenant_at_start_up_and_merge_file_and_inline(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown tenant attribute"):
        AuthSettings(enabled=True, keys="tenant acme burst=3")
    with pytest.raises(ValueError, match="tenant name"):
        AuthSettings(enabled=True, keys=f"client {entry_for(ACME, Role.client).digest} tenant=A*")
    keys = tmp_path / "keys"
    keys.write_text(f"tenant acme requests_per_s=2\n{entry_for(ACME, Role.client, tenant='acme').line()}\n")
    settings = AuthSettings(enabled=True, keys_file=keys, keys="tenant free weight=3")
    assert settings.tenant_policies() == {
        "acme": TenantPolicy("acme", requests_per_s=2),
        "free": TenantPolicy("free", weight=3),
    }
    assert settings.key_ring().entry_of(ACME).tenant == "acme"
