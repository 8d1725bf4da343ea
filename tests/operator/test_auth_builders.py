"""Spec: API keys in Kubernetes — on by default; the operator keeps an admin, a client and its own
key in the NAME-api-keys Secret, mounts only their digests into the shards, never rotates them on
reconcile, and removes it all when spec.auth.enabled is false."""

from __future__ import annotations

import base64

from themis_core.access_policy import Role
from themis_core.api_keys import KeyRing, parse_entries
from themis_core.certificates import generate_ca
from themis_operator.builders import ClusterContext, build_children
from themis_operator.builders.auth import build_api_keys_secret
from themis_operator.builders.plan import next_plan
from themis_operator.builders.statefulset import build_statefulset
from themis_testing.validation import load_example, validate_manifest

CA = generate_ca("demo")


def ctx(**spec) -> ClusterContext:
    body = load_example("themiscluster.yaml")
    body["spec"].update(spec)
    body["metadata"].update(namespace="prod", uid="uid-1")
    return ClusterContext.from_body(body)


def decoded(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def test_keys_are_on_by_default_and_shards_mount_only_the_digests() -> None:
    c = ctx()
    assert c.spec.auth.enabled
    sts = build_statefulset(c, 3)
    pod = sts["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["THEMIS_AUTH_ENABLED"] == "true"
    assert env["THEMIS_AUTH_KEYS_FILE"] == "/etc/themis/auth/keys"
    (volume,) = [v for v in pod["volumes"] if v["name"] == "api-keys"]
    assert volume["secret"]["secretName"] == "demo-api-keys"
    assert volume["secret"]["items"] == [{"key": "keys", "path": "keys"}]  # no plaintext key in the pod


def test_the_secret_holds_keys_for_users_and_the_operator_and_their_digests() -> None:
    secret = build_api_keys_secret(ctx(), None)
    validate_manifest(secret)
    data = decoded(secret)
    ring = KeyRing(parse_entries(data["keys"]))
    assert ring.role_of(data["admin.key"].strip()) is Role.admin
    assert ring.role_of(data["client.key"].strip()) is Role.client
    assert ring.role_of(data["operator.key"].strip()) is Role.admin
    assert all(data[k].strip() not in data["keys"] for k in ("admin.key", "client.key", "operator.key"))


def test_reconciling_keeps_the_keys() -> None:
    first = build_api_keys_secret(ctx(), None)
    again = build_api_keys_secret(ctx(), first)
    assert again["data"] == first["data"]


def test_auth_disabled_removes_the_secret_and_the_env() -> None:
    c = ctx(auth={"enabled": False})
    plan, _ = next_plan(c, [], None)
    built = build_children(c, replicas=3, plan=plan, ca=CA, existing_tls=None)
    assert "demo-api-keys" not in [m["metadata"]["name"] for m in built.apply]
    assert ("Secret", "demo-api-keys") in [(r.kind, r.name) for r in built.remove]
    env = [e["name"] for e in build_statefulset(c, 3)["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert "THEMIS_AUTH_ENABLED" not in env


def test_the_operator_probes_a_shard_with_keys_on_using_its_own_key(tmp_path) -> None:
    import socket
    import threading
    import time

    import httpx
    import uvicorn
    from themis_operator.probe import ShardProber
    from themis_shard.app import create_app
    from themis_shard.auth.settings import AuthSettings
    from themis_shard.llm.settings import LLMSettings
    from themis_shard.settings import Settings

    data = decoded(build_api_keys_secret(ctx(), None))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(
        shard_id="demo-0",
        data_dir=tmp_path / "shard",
        port=port,
        llm=LLMSettings(enabled=False),
        auth=AuthSettings(enabled=True, keys=data["keys"]),
    )
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        prober = ShardProber(timeout_s=2, url_template=f"http://127.0.0.1:{port}")
        (with_key,) = prober.probe("demo", "prod", 1, 1, False, api_key=data["operator.key"].strip())
        (without,) = prober.probe("demo", "prod", 1, 1, False)
        assert with_key.reachable and with_key.ringVersion >= 1
        assert not without.reachable  # 401: an operator without the key learns nothing
    finally:
        server.should_exit = True
        thread.join(timeout=10)
