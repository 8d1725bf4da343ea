"""How the kubelet turns a pod spec into a process: argv, environment and working directory."""

import sys
from pathlib import Path

import pytest
from themis_testing.kube_node.env import ConfigError
from themis_testing.kube_node.image import ImageConfig
from themis_testing.kube_node.kubelet import Cache, KubeletConfig, PodRunner

IMAGE = ImageConfig(
    entrypoint=["themis-shard"],
    env={"PATH": "/opt/themis/bin:/usr/bin:/bin", "HOME": "/home/themis", "THEMIS_DATA_DIR": "/data"},
    workdir="/home/themis",
    prefixes=["/opt/themis"],
)


def pod(**container):
    return {
        "metadata": {"name": "demo-0", "namespace": "ns", "uid": "pod-uid"},
        "spec": {
            "containers": [
                {
                    "name": "shard",
                    "env": [
                        {
                            "name": "THEMIS_SHARD_ID",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        {"name": "THEMIS_HOST", "value": "0.0.0.0"},
                        {"name": "THEMIS_PLAN_PATH", "value": "/etc/themis/plan/plan.json"},
                        {"name": "THEMIS_TLS_CERT_PATH", "value": "/etc/themis/tls/$(THEMIS_SHARD_ID).crt"},
                    ],
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/data"},
                        {"name": "plan", "mountPath": "/etc/themis/plan"},
                        {"name": "tls", "mountPath": "/etc/themis/tls"},
                    ],
                    **container,
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-demo-0"}},
                {"name": "plan", "configMap": {"name": "demo-plan"}},
                {"name": "tls", "secret": {"secretName": "demo-tls"}},
            ],
        },
    }


def cache(with_claim=True):
    c = Cache()
    c.configmaps[("ns", "demo-plan")] = {"metadata": {"name": "demo-plan"}, "data": {"plan.json": "{}"}}
    c.secrets[("ns", "demo-tls")] = {"metadata": {"name": "demo-tls"}, "data": {"demo-0.crt": "UEVN"}}
    if with_claim:
        c.claims[("ns", "data-demo-0")] = {"metadata": {"name": "data-demo-0", "uid": "claim-uid-123"}}
    return c


def runner(tmp_path, p=None, c=None):
    config = KubeletConfig(root=tmp_path, image=IMAGE, venv=Path(sys.prefix), pythonpath=["/masks", "/code"])
    return PodRunner(p or pod(), "127.9.9.2", config, c or cache(), api=None)  # type: ignore[arg-type]


def test_the_pod_spec_becomes_argv_env_and_cwd_on_host_paths(tmp_path):
    r = runner(tmp_path)
    argv, env, cwd = r.process_config(r.pod["spec"]["containers"][0])
    root = tmp_path / "pods" / "ns" / "demo-0"
    assert argv == [str(Path(sys.prefix) / "bin" / "themis-shard")]  # the image's ENTRYPOINT via its PATH
    assert env["THEMIS_SHARD_ID"] == "demo-0"
    assert env["THEMIS_HOST"] == "127.9.9.2"  # a wildcard bind address is the pod's own address
    assert env["THEMIS_DATA_DIR"] == str(tmp_path / "volumes" / "ns" / "data-demo-0-claim-ui")
    assert env["THEMIS_PLAN_PATH"] == str(root / "volumes" / "plan" / "plan.json")
    assert env["THEMIS_TLS_CERT_PATH"] == str(root / "volumes" / "tls" / "demo-0.crt")
    assert Path(env["THEMIS_PLAN_PATH"]).read_text() == "{}"
    assert Path(env["THEMIS_TLS_CERT_PATH"]).read_bytes() == b"PEM"
    assert env["HOME"] == cwd == str(root / "rootfs" / "home" / "themis")
    assert env["PYTHONPATH"].split(":")[:2] == ["/masks", "/code"]
    # Mounts are also reachable through the pod's root, as inside a container.
    assert (root / "rootfs" / "etc" / "themis" / "plan" / "plan.json").read_text() == "{}"


def test_a_missing_claim_or_config_is_a_container_config_error(tmp_path):
    r = runner(tmp_path, c=cache(with_claim=False))
    with pytest.raises(ConfigError, match='persistentvolumeclaim "data-demo-0" not found'):
        r.process_config(r.pod["spec"]["containers"][0])
    c = cache()
    del c.secrets[("ns", "demo-tls")]
    r = runner(tmp_path, c=c)
    with pytest.raises(ConfigError, match='secret "demo-tls" not found'):
        r.process_config(r.pod["spec"]["containers"][0])


def test_what_the_node_cannot_do_is_refused_by_name(tmp_path):
    p = pod(command=["no-such-binary-here"])
    r = runner(tmp_path, p)
    with pytest.raises(ConfigError, match="no-such-binary-here"):
        r.process_config(p["spec"]["containers"][0])
    p = pod()
    p["spec"]["containers"][0]["volumeMounts"][0]["subPath"] = "x"
    with pytest.raises(ConfigError, match="subPath"):
        runner(tmp_path, p).process_config(p["spec"]["containers"][0])
    p = pod()
    p["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    p["spec"]["containers"][0]["volumeMounts"].append({"name": "host", "mountPath": "/host"})
    with pytest.raises(ConfigError, match="hostPath"):
        runner(tmp_path, p).process_config(p["spec"]["containers"][0])
