"""Spec: a handler that lost a race with the plan authority runs again in a second, not after
kopf's default minute, and nothing else is swallowed."""

from __future__ import annotations

import kopf
import pytest
from themis_operator.kube import Conflict, KubeError
from themis_operator.retries import CONFLICT_RETRY_S, soon_after_conflict


def test_a_conflict_is_retried_in_a_second() -> None:
    with pytest.raises(kopf.TemporaryError) as raised, soon_after_conflict():
        raise Conflict('{"reason": "Conflict"}')
    assert raised.value.delay == CONFLICT_RETRY_S == 1.0
    assert "changed underneath" in str(raised.value)


def test_other_errors_pass_through_unchanged() -> None:
    with pytest.raises(KubeError) as raised, soon_after_conflict():
        raise KubeError(500, "boom")
    assert not isinstance(raised.value, kopf.TemporaryError) and raised.value.status == 500
