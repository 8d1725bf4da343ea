"""A container's environment, as the kubelet builds it from the pod spec."""

import base64

import pytest
from themis_testing.kube_node.env import ConfigError, PodFacts, container_argv, container_env, expand

POD = PodFacts(name="demo-1", namespace="prod", uid="u-1", pod_ip="127.9.9.3", labels={"app": "themis"})
SECRETS = {
    "demo-gossip": {
        "metadata": {"name": "demo-gossip"},
        "data": {"key": base64.b64encode(b"s3cret").decode()},
    }
}
CONFIGMAPS = {"tuning": {"metadata": {"name": "tuning"}, "data": {"BATCH": "64", "MODE": "fast"}}}


def env(container, image_env=None):
    return container_env(container, POD, image_env or {}, CONFIGMAPS, SECRETS)


def test_expansion_uses_earlier_variables_and_keeps_unknown_references():
    assert expand("/tls/$(ID).crt", {"ID": "demo-0"}) == "/tls/demo-0.crt"
    assert expand("$(MISSING)/x", {}) == "$(MISSING)/x"
    assert expand("cost $$(ID)", {"ID": "x"}) == "cost $(ID)"


def test_values_field_refs_secrets_and_config_maps():
    got = env(
        {
            "env": [
                {"name": "ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "GOSSIP", "valueFrom": {"secretKeyRef": {"name": "demo-gossip", "key": "key"}}},
                {"name": "BATCH", "valueFrom": {"configMapKeyRef": {"name": "tuning", "key": "BATCH"}}},
                {"name": "CERT", "value": "/etc/tls/$(ID).crt"},
            ]
        }
    )
    assert got == {
        "ID": "demo-1",
        "NS": "prod",
        "IP": "127.9.9.3",
        "APP": "themis",
        "GOSSIP": "s3cret",
        "BATCH": "64",
        "CERT": "/etc/tls/demo-1.crt",
    }


def test_image_env_then_env_from_then_env_later_wins():
    got = env(
        {
            "envFrom": [
                {"configMapRef": {"name": "tuning"}, "prefix": "T_"},
                {"secretRef": {"name": "demo-gossip"}},
            ],
            "env": [{"name": "T_MODE", "value": "slow"}, {"name": "PORT", "value": "9000"}],
        },
        image_env={"PORT": "8080", "HOME": "/home/themis"},
    )
    assert got == {"PORT": "9000", "HOME": "/home/themis", "T_BATCH": "64", "T_MODE": "slow", "key": "s3cret"}


def test_what_cannot_be_resolved_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"spec\.containers"):
        env({"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}]})
    with pytest.raises(ConfigError, match='secret "nope" not found'):
        env({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]})
    with pytest.raises(ConfigError, match="couldn't find key other"):
        env({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "tuning", "key": "other"}}}]})
    with pytest.raises(ConfigError, match="resourceFieldRef"):
        env({"env": [{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]})
    optional = {"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}}
    assert "X" not in env({"env": [optional]})


def test_argv_follows_entrypoint_and_cmd_rules():
    e = {"ID": "demo-0"}
    assert container_argv({}, ["themis-shard"], ["--log-level", "info"], e) == [
        "themis-shard",
        "--log-level",
        "info",
    ]
    assert container_argv({"args": ["--x", "$(ID)"]}, ["themis-shard"], ["--y"], e) == [
        "themis-shard",
        "--x",
        "demo-0",
    ]
    assert container_argv({"command": ["sh"]}, ["themis-shard"], ["--y"], e) == ["sh"]
    with pytest.raises(ConfigError, match="no command"):
        container_argv({}, [], [], e)
