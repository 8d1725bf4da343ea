"""Spec: concurrent KV-prefix imports are bounded; one past the limit is a 429 at once."""

from __future__ import annotations

import pytest
from themis_shard.api.kv_prefix import ImportGate
from themis_shard.errors import ThemisError


def test_imports_past_the_limit_are_refused_until_one_finishes() -> None:
    gate = ImportGate(2)
    gate.enter()
    gate.enter()
    with pytest.raises(ThemisError) as refused:
        gate.enter()
    assert refused.value.status == 429 and refused.value.code == "too_many_imports"
    assert refused.value.headers["Retry-After"] == "1"
    gate.leave()
    gate.enter()
    assert gate.active == 2
