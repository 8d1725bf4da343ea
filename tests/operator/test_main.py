"""``python -m themis_operator``: scope flags map onto kopf's namespaces / cluster-wide mode."""

import sys
import types

import kopf
import pytest
from themis_operator.__main__ import main


@pytest.fixture
def kopf_run(monkeypatch):
    calls = []
    monkeypatch.setattr(kopf, "run", lambda **kw: calls.append(kw))
    # Importing the real handlers would fix the timer interval before the kopf tests set it.
    monkeypatch.setitem(sys.modules, "themis_operator.handlers", types.ModuleType("themis_operator.handlers"))
    monkeypatch.delenv("WATCH_NAMESPACE", raising=False)
    return calls


@pytest.mark.parametrize(
    ("argv", "clusterwide", "namespaces"),
    [
        ([], False, ["default"]),
        (["--namespace", "prod", "-n", "staging"], False, ["prod", "staging"]),
        (["--all-namespaces"], True, []),
    ],
)
def test_scope_flags(kopf_run, argv, clusterwide, namespaces):
    main(argv)
    (call,) = kopf_run
    assert call["clusterwide"] is clusterwide and call["namespaces"] == namespaces
    assert call["standalone"] is True


def test_peering_turns_standalone_off(kopf_run):
    main(["-A", "--peering", "themis"])
    assert kopf_run[0]["standalone"] is False and kopf_run[0]["peering_name"] == "themis"


def test_namespace_and_all_namespaces_exclude_each_other(kopf_run):
    with pytest.raises(SystemExit):
        main(["-n", "a", "-A"])
