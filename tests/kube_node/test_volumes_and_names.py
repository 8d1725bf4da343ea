"""ConfigMap/Secret volumes as files, /etc/hosts blocks, and Service endpoints."""

import base64
import os

import pytest
from themis_testing.kube_node.addresses import Addresses, pod_names, render_block, replace_block
from themis_testing.kube_node.env import ConfigError
from themis_testing.kube_node.service_proxy import endpoints
from themis_testing.kube_node.volumes import sync_files, volume_files

CM = {"demo-plan": {"metadata": {"name": "demo-plan"}, "data": {"plan.json": "{}"}}}
SECRET = {
    "demo-tls": {"metadata": {"name": "demo-tls"}, "data": {"ca.crt": base64.b64encode(b"PEM").decode()}}
}


def test_config_map_and_secret_volumes_become_files_with_their_modes():
    assert volume_files({"name": "plan", "configMap": {"name": "demo-plan"}}, CM, {}) == {
        "plan.json": (b"{}", 0o644)
    }
    tls = {"name": "tls", "secret": {"secretName": "demo-tls", "defaultMode": 0o400}}
    assert volume_files(tls, {}, SECRET) == {"ca.crt": (b"PEM", 0o400)}
    items = {
        "name": "p",
        "configMap": {"name": "demo-plan", "items": [{"key": "plan.json", "path": "sub/p.json"}]},
    }
    assert volume_files(items, CM, {}) == {"sub/p.json": (b"{}", 0o644)}
    with pytest.raises(ConfigError, match='configmap "nope" not found'):
        volume_files({"name": "x", "configMap": {"name": "nope"}}, CM, {})


def test_sync_replaces_changed_files_and_removes_vanished_keys(tmp_path):
    assert sync_files(tmp_path, {"a": (b"1", 0o644), "b": (b"2", 0o400)})
    assert not sync_files(tmp_path, {"a": (b"1", 0o644), "b": (b"2", 0o400)})  # nothing to do
    assert sync_files(tmp_path, {"a": (b"new", 0o644)})
    assert (tmp_path / "a").read_bytes() == b"new" and not (tmp_path / "b").exists()
    assert os.stat(tmp_path / "a").st_mode & 0o777 == 0o644


def test_addresses_are_stable_per_name_and_services_get_their_own_range():
    a = Addresses("127.50.60")
    assert a.get("pod", "ns", "demo-0") == "127.50.60.2" == a.get("pod", "ns", "demo-0")
    assert a.get("pod", "ns", "demo-1") == "127.50.60.3"
    assert a.get("svc", "ns", "demo") == "127.50.60.200"
    a.release("pod", "ns", "demo-0")
    assert a.get("pod", "ns", "demo-2") == "127.50.60.2"


def test_hosts_blocks_are_replaced_in_place_and_dead_owners_dropped():
    names = pod_names("demo-0", "demo-headless", "ns")
    assert names == [
        "demo-0.demo-headless.ns.svc.cluster.local",
        "demo-0.demo-headless.ns.svc",
        "demo-0.demo-headless.ns",
    ]
    mine = os.getpid()
    text = "127.0.0.1 localhost\n" + render_block(999_999_999, [("127.1.1.2", ["gone"])])
    text = replace_block(text, mine, render_block(mine, [("127.1.1.2", names)]))
    assert text.startswith("127.0.0.1 localhost\n# BEGIN themis-kube-node")
    assert "gone" not in text and "127.1.1.2 demo-0.demo-headless.ns.svc.cluster.local" in text
    assert replace_block(text, mine, "") == "127.0.0.1 localhost\n"


def test_a_service_forwards_to_ready_selected_pods_by_named_target_port():
    svc = {"metadata": {"namespace": "ns"}, "spec": {"selector": {"app": "themis"}}}

    def pod(ip, ready, labels=None):
        return {
            "metadata": {"namespace": "ns", "labels": labels or {"app": "themis"}},
            "spec": {"containers": [{"ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {
                "podIP": ip,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }

    pods = [
        pod("127.1.1.3", True),
        pod("127.1.1.2", True),
        pod("127.1.1.4", False),
        pod("127.1.1.5", True, {"a": "b"}),
    ]
    assert endpoints(svc, pods, {"port": 80, "targetPort": "http"}) == [
        ("127.1.1.2", 8080),
        ("127.1.1.3", 8080),
    ]
    assert endpoints(svc, pods, {"port": 9000}) == [("127.1.1.2", 9000), ("127.1.1.3", 9000)]
