"""themis_testing.image_pod: a StatefulSet pod template rendered for a container run."""

from __future__ import annotations

import base64

import pytest
from themis_testing.image_pod import PodRenderError, pod_env, pod_volumes

SECRETS = {"c-gossip": {"data": {"secret": base64.b64encode(b"k3y").decode()}}}
CONFIGMAPS = {"c-plan": {"data": {"plan.json": '{"version": 1}', "mode": "raid1"}}}


def env_of(container):
    return pod_env(container, pod_name="c-0", namespace="ns", secrets=SECRETS, configmaps=CONFIGMAPS)


def test_env_values_field_refs_secret_and_configmap_keys_and_earlier_references():
    container = {
        "env": [
            {"name": "THEMIS_SHARD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "GOSSIP", "valueFrom": {"secretKeyRef": {"name": "c-gossip", "key": "secret"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "c-plan", "key": "mode"}}},
            {"name": "CERT", "value": "/etc/tls/$(THEMIS_SHARD_ID).crt"},
            {"name": "LATER", "value": "$(UNDEFINED)"},
            {"name": "PORT", "value": 8080},
        ]
    }
    assert env_of(container) == {
        "THEMIS_SHARD_ID": "c-0",
        "NS": "ns",
        "GOSSIP": "k3y",
        "MODE": "raid1",
        "CERT": "/etc/tls/c-0.crt",
        "LATER": "$(UNDEFINED)",
        "PORT": "8080",
    }


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}, "fieldRef status.podIP"),
        ({"name": "X", "valueFrom": {"secretKeyRef": {"name": "c-gossip", "key": "nope"}}}, "no key nope"),
        ({"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}, "resourceFieldRef"),
    ],
)
def test_what_the_renderer_cannot_resolve_is_refused_by_name(item, message):
    with pytest.raises(PodRenderError, match=message):
        env_of({"env": [item]})
    with pytest.raises(PodRenderError, match="envFrom"):
        env_of({"envFrom": [{"configMapRef": {"name": "c-plan"}}]})


def test_volumes_become_files_or_per_pod_claims():
    pod_spec = {
        "volumes": [
            {"name": "plan", "configMap": {"name": "c-plan"}},
            {"name": "gossip", "secret": {"secretName": "c-gossip"}},
            {"name": "models", "persistentVolumeClaim": {"claimName": "weights-pvc", "readOnly": True}},
        ]
    }
    container = {
        "volumeMounts": [
            {"name": "data", "mountPath": "/data"},
            {"name": "plan", "mountPath": "/etc/themis/plan", "readOnly": True},
            {"name": "gossip", "mountPath": "/etc/gossip"},
            {"name": "models", "mountPath": "/models/w", "readOnly": True},
        ]
    }
    data, plan, gossip, models = pod_volumes(
        pod_spec,
        container,
        [{"metadata": {"name": "data"}}],
        pod_name="c-0",
        secrets=SECRETS,
        configmaps=CONFIGMAPS,
    )
    assert (data.mount_path, data.claim, data.read_only) == ("/data", "data-c-0", False)
    assert plan.files == {"plan.json": b'{"version": 1}', "mode": b"raid1"} and plan.read_only
    assert gossip.files == {"secret": b"k3y"} and gossip.read_only  # ConfigMaps and Secrets are read-only
    assert (models.claim, models.read_only) == ("weights-pvc", True)


def test_unknown_volume_kinds_and_sub_paths_are_refused():
    with pytest.raises(PodRenderError, match=r"\['emptyDir'\] is not supported"):
        pod_volumes(
            {"volumes": [{"name": "tmp", "emptyDir": {}}]},
            {"volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]},
            [],
            pod_name="c-0",
            secrets={},
            configmaps={},
        )
    with pytest.raises(PodRenderError, match="subPath"):
        pod_volumes(
            {},
            {"volumeMounts": [{"name": "x", "mountPath": "/x", "subPath": "a"}]},
            [],
            pod_name="c-0",
            secrets={},
            configmaps={},
        )
