"""NOTES.txt tells the truth about API keys: on unless the values turn them off (false is not
"unset", which Helm's ``default`` would make of it)."""

from __future__ import annotations

import pytest

from .conftest import NAMESPACE


def notes(chart, spec: dict) -> str:
    values = {"cluster": {"enabled": True, "name": "demo", "spec": {"shards": 3, **spec}}}
    return chart.render(values, name="themis", namespace=NAMESPACE)["themis/templates/NOTES.txt"]


@pytest.mark.parametrize("spec", [{}, {"auth": {}}, {"auth": {"enabled": True}}])
def test_notes_say_keys_are_on_when_auth_is_on_or_unset(chart, spec):
    text = notes(chart, spec)
    assert "API keys are on" in text and "demo-api-keys" in text
    assert "API keys are off" not in text


def test_notes_say_keys_are_off_when_the_user_turned_them_off(chart):
    text = notes(chart, {"auth": {"enabled": False}})
    assert "API keys are off" in text
    assert "API keys are on" not in text and "demo-api-keys" not in text
