"""Pure builders: a ThemisCluster spec → the exact manifests, valid for Kubernetes 1.29 and 1.37."""

import base64
import json

import pytest
from cryptography import x509
from themis_core.certificates import generate_ca
from themis_core.plan import ClusterPlan
from themis_operator.builders import ClusterContext, build_children
from themis_operator.builders.pdb import build_pdb
from themis_operator.builders.plan import build_plan_configmap, next_plan, place_adapter, previous_plan
from themis_operator.builders.statefulset import build_statefulset
from themis_operator.builders.tls import build_tls_secret, ca_material
from themis_operator.spec import LoRAAdapterSpec
from themis_testing.validation import load_example, validate_manifest

CA = generate_ca("demo")


def ctx(**spec) -> ClusterContext:
    body = load_example("themiscluster.yaml")
    body["spec"].update(spec)
    body["metadata"].update(namespace="prod", uid="uid-1")
    return ClusterContext.from_body(body)


def children(c: ClusterContext, replicas: int | None = None):
    plan, _ = next_plan(c, [], None)
    return build_children(c, replicas=replicas or c.spec.shards, plan=plan, ca=CA, existing_tls=None)


def env_of(sts: dict) -> dict:
    container = sts["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"tls": {"enabled": False}, "resources": {"gpus": 0}},
        {"monitoring": {"serviceMonitor": True}, "storage": {"storageClassName": "fast"}},
        {
            "model": {"source": "pvc://models/gemma.gguf", "sha256": "a" * 64},
            "draftModel": {"source": "pvc://models/draft.gguf"},
            "resources": {"gpus": 2, "nodeSelector": {"pool": "gpu"}, "cpuLimit": "4", "memoryLimit": "16Gi"},
        },
    ],
)
def test_every_built_manifest_is_valid_for_supported_kubernetes_versions(spec):
    for manifest in children(ctx(**spec)).apply:
        if manifest["apiVersion"] == "monitoring.coreos.com/v1":
            assert manifest["spec"]["endpoints"][0]["path"] == "/metrics"
            continue
        validate_manifest(manifest)


def test_children_come_in_dependency_order_with_owner_references_and_labels():
    built = children(ctx(monitoring={"serviceMonitor": True}))
    kinds = [(m["kind"], m["metadata"]["name"]) for m in built.apply]
    assert kinds == [
        ("Secret", "demo-gossip"),
        ("Secret", "demo-ca"),
        ("Secret", "demo-tls"),
        ("Secret", "demo-api-keys"),
        ("ConfigMap", "demo-plan"),
        ("Service", "demo-headless"),
        ("Service", "demo"),
        ("StatefulSet", "demo"),
        ("PodDisruptionBudget", "demo"),
        ("ServiceMonitor", "demo"),
    ]
    for m in built.apply:
        (owner,) = m["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "themisdb.io/v1alpha1",
            "kind": "ThemisCluster",
            "name": "demo",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
        assert m["metadata"]["labels"]["themisdb.io/cluster"] == "demo"
        assert m["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "themis-operator"
        assert m["metadata"]["namespace"] == "prod"


def test_statefulset_requests_gpus_with_toleration_and_spreads_shards():
    sts = build_statefulset(ctx(resources={"gpus": 2, "cpu": "4", "memory": "16Gi"}), 3)
    pod = sts["spec"]["template"]["spec"]
    res = pod["containers"][0]["resources"]
    assert res["requests"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "2"}
    assert res["limits"]["nvidia.com/gpu"] == "2"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
        "podAffinityTerm"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    assert env_of(sts)["THEMIS_USE_GPU"] == "true"


def test_cpu_only_statefulset_has_no_gpu_request_or_toleration():
    pod = build_statefulset(ctx(resources={"gpus": 0}), 3)["spec"]["template"]["spec"]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["requests"]
    assert "tolerations" not in pod


def test_statefulset_runs_the_shard_with_the_contracted_env_mounts_and_probes():
    sts = build_statefulset(ctx(), 3)
    spec = sts["spec"]
    assert spec["replicas"] == 3 and spec["serviceName"] == "demo-headless"
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    container = spec["template"]["spec"]["containers"][0]
    assert container["command"] == ["themis-shard"]
    env = env_of(sts)
    assert env["THEMIS_SHARD_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["THEMIS_PORT"] == "8080" and env["THEMIS_DATA_DIR"] == "/data"
    assert env["THEMIS_PLAN_PATH"] == "/etc/themis/plan/plan.json"
    assert env["THEMIS_LLM_MODEL_PATH"] == "bundled"
    assert env["THEMIS_LLM_CHUNKED_PREFILL_SIZE"] == "512" and env["THEMIS_LLM_N_DRAFT"] == "8"
    assert env["THEMIS_CLUSTER_GOSSIP_SECRET"] == {"secretKeyRef": {"name": "demo-gossip", "key": "secret"}}
    # Each pod picks its own pair out of the shared Secret (Kubernetes expands $(VAR)).
    assert env["THEMIS_TLS_CERT_PATH"] == "/etc/themis/tls/$(THEMIS_SHARD_ID).crt"
    assert env["THEMIS_TLS_KEY_PATH"] == "/etc/themis/tls/$(THEMIS_SHARD_ID).key"
    assert env["THEMIS_TLS_CA_PATH"] == "/etc/themis/tls/ca.crt"
    assert env["THEMIS_INTERNAL_PORT"] == "8443"
    names_in_order = [e["name"] for e in container["env"]]
    assert names_in_order.index("THEMIS_SHARD_ID") < names_in_order.index("THEMIS_TLS_CERT_PATH")
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8080, "internal": 8443}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts == {
        "/data": "data",
        "/weights": "weights",
        "/etc/themis/plan": "plan",
        "/etc/themis/tls": "tls",
        "/tmp": "tmp",  # the only writable place outside the volumes (read-only root filesystem)
        "/etc/themis/auth": "api-keys",
    }
    volumes = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {}}
    assert volumes["plan"]["configMap"]["name"] == "demo-plan"
    assert volumes["tls"]["secret"]["secretName"] == "demo-tls"
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http", "scheme": "HTTPS"}
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    claims = {
        c["metadata"]["name"]: c["spec"]["resources"]["requests"]["storage"]
        for c in spec["volumeClaimTemplates"]
    }
    assert claims == {"data": "20Gi", "weights": "10Gi"}


def test_pvc_model_sources_are_mounted_read_only_and_passed_as_paths():
    sts = build_statefulset(
        ctx(model={"source": "pvc://models/gemma/q4.gguf"}, draftModel={"source": "pvc://models/draft.gguf"}),
        3,
    )
    env = env_of(sts)
    assert env["THEMIS_LLM_MODEL_PATH"] == "/models/models/gemma/q4.gguf"
    assert env["THEMIS_LLM_DRAFT_MODEL_PATH"] == "/models/models/draft.gguf"
    assert env["THEMIS_LLM_SPECULATIVE_SOURCE"] == "local"  # the draft model is used, not just mounted
    vols = [v for v in sts["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert vols == [{"name": "models-0", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}}]


def test_shard_pods_meet_pod_security_restricted():
    pod = build_statefulset(ctx(), 3)["spec"]["template"]["spec"]
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 1000
    assert security["fsGroup"] == 1000 and security["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    c = container["securityContext"]
    assert c["allowPrivilegeEscalation"] is False and c["capabilities"] == {"drop": ["ALL"]}
    assert c["readOnlyRootFilesystem"] is True and c["seccompProfile"] == {"type": "RuntimeDefault"}
    env = env_of(build_statefulset(ctx(), 3))
    # Caches go to the weights volume; a start-up failure's reason to the termination log.
    assert env["THEMIS_LLM_EMBEDDING_CACHE_DIR"].startswith("/weights/")
    assert env["THEMIS_LLM_PROBE_CACHE_DIR"].startswith("/weights/")
    assert env["THEMIS_TERMINATION_MESSAGE_PATH"] == container["terminationMessagePath"]
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert not any(
        c.get("privileged") or c.get("hostNetwork") for c in (pod, container["securityContext"])
    ) and not any("hostPath" in v for v in pod["volumes"])


def test_scheduling_and_pull_fields_reach_the_pod_template():
    sts = build_statefulset(
        ctx(
            imagePullSecrets=[{"name": "regcred"}],
            podAnnotations={"team": "search", "prometheus.io/scrape": "false"},
            priorityClassName="themis-high",
            nodeSelector={"pool": "gpu"},
            tolerations=[
                {"key": "dedicated", "operator": "Equal", "value": "themis", "effect": "NoSchedule"}
            ],
            resources={"nodeSelector": {"zone": "a", "pool": "old"}},
        ),
        3,
    )
    template = sts["spec"]["template"]
    pod = template["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["priorityClassName"] == "themis-high"
    assert pod["nodeSelector"] == {"zone": "a", "pool": "gpu"}  # spec.nodeSelector wins
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "themis", "effect": "NoSchedule"}
    ]
    assert template["metadata"]["annotations"]["team"] == "search"
    assert template["metadata"]["annotations"]["prometheus.io/scrape"] == "false"  # the user's word
    validate_manifest(sts)
    bare = build_statefulset(ctx(), 3)["spec"]["template"]["spec"]
    assert not {"imagePullSecrets", "priorityClassName", "nodeSelector"} & set(bare)


@pytest.mark.parametrize(
    ("spec", "enabled"),
    [
        ({"raidMode": "raid1", "shards": 3}, False),
        ({"raidMode": "raid5", "shards": 3}, True),  # the `themis up` rule: on for raid5/raid6
        ({"raidMode": "raid6", "shards": 4}, True),
        ({"raidMode": "raid5", "shards": 3, "raid": {"weights": False}}, False),
        ({"raidMode": "raid1", "shards": 2, "raid": {"weights": True}}, True),
        ({"raidMode": "raid5", "shards": 3, "engine": {"llm": False}}, False),  # no model to stripe
    ],
)
def test_raid_weight_striping_follows_the_spec_with_units_on_the_weights_volume(spec, enabled):
    env = env_of(build_statefulset(ctx(**spec), spec["shards"]))
    assert (env.get("THEMIS_RAID_ENABLED") == "true") is enabled
    if enabled:
        assert env["THEMIS_RAID_WEIGHTS_DIR"] == "/weights/raid"


def test_shards_without_a_model_for_fast_clusters():
    env = env_of(build_statefulset(ctx(engine={"llm": False}), 3))
    assert env["THEMIS_LLM_ENABLED"] == "false"


def test_pvc_adapters_are_mounted_read_only_in_every_pod_and_planned_as_their_mounted_path():
    spec = LoRAAdapterSpec.model_validate(
        {"clusterRef": {"name": "demo"}, "domain": "legal", "source": "pvc://adapters/legal/v1.gguf"}
    )
    c = ctx()
    plan, _ = next_plan(c, [("legal", spec)], None)
    (placed,) = plan.adapters
    assert placed.source == "/adapters/adapters/legal/v1.gguf"
    built = build_children(c, replicas=3, plan=plan, ca=CA, existing_tls=None, adapter_claims=["adapters"])
    sts = next(m for m in built.apply if m["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    assert {
        "name": "adapters-0",
        "persistentVolumeClaim": {"claimName": "adapters", "readOnly": True},
    } in pod["volumes"]
    assert {"name": "adapters-0", "mountPath": "/adapters/adapters", "readOnly": True} in pod["containers"][
        0
    ]["volumeMounts"]
    http = LoRAAdapterSpec.model_validate(
        {"clusterRef": {"name": "demo"}, "domain": "legal", "source": "https://x.example/a.gguf"}
    )
    plan, _ = next_plan(c, [("legal", http)], None)
    assert plan.adapters[0].source == "https://x.example/a.gguf"  # the shard fetches it


def test_embedding_model_goes_to_the_engines_embedding_setting():
    env = env_of(
        build_statefulset(ctx(embeddingModel={"source": "pvc://emb/minilm.gguf", "dimension": 384}), 3)
    )
    assert env["THEMIS_LLM_EMBEDDING_MODEL"] == "/models/emb/minilm.gguf"


def test_tls_disabled_means_http_probes_and_no_tls_volume():
    sts = build_statefulset(ctx(tls={"enabled": False}), 2)
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
    assert "tls" not in {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert not {"THEMIS_TLS_CA_PATH", "THEMIS_INTERNAL_PORT"} & set(env_of(sts))
    assert [p["name"] for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]] == ["http"]


@pytest.mark.parametrize(
    ("raid", "shards", "max_unavailable"),
    # raid0 tolerates no loss, but a budget of 0 would block every node drain: it gets 1.
    [("raid0", 2, 1), ("raid0", 1, 1), ("raid1", 2, 1), ("raid5", 3, 1), ("raid6", 4, 2)],
)
def test_pdb_allows_as_many_voluntary_disruptions_as_the_raid_mode_tolerates_and_never_none(
    raid, shards, max_unavailable
):
    pdb = build_pdb(ctx(raidMode=raid, shards=shards))
    assert pdb["spec"]["maxUnavailable"] == max_unavailable
    assert pdb["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "themis",
        "app.kubernetes.io/instance": "demo",
    }


def test_headless_service_publishes_not_ready_shards_for_peer_discovery():
    built = {(m["kind"], m["metadata"]["name"]): m for m in children(ctx()).apply}
    headless = built[("Service", "demo-headless")]["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert [p["port"] for p in headless["ports"]] == [8080, 8443]  # peers' mTLS listener
    assert [p["port"] for p in built[("Service", "demo")]["spec"]["ports"]] == [8080]


def test_plan_configmap_carries_build_plan_output_with_kubernetes_member_urls():
    c = ctx()
    plan, _ = next_plan(c, [], None)
    cm = build_plan_configmap(c, plan)
    loaded = ClusterPlan.from_json(cm["data"]["plan.json"])
    assert [m.shard_id for m in loaded.members] == ["demo-0", "demo-1", "demo-2"]
    assert loaded.members[1].url == "https://demo-1.demo-headless.prod.svc:8080"
    assert loaded.members[1].internal_url == "https://demo-1.demo-headless.prod.svc:8443"
    assert loaded.raid_mode == "raid5" and loaded.tls is True and loaded.ring_version == 1
    assert cm["metadata"]["annotations"]["themisdb.io/ring-version"] == "1"
    http = next_plan(ctx(tls={"enabled": False}), [], None)[0]
    assert http.members[0].url.startswith("http://demo-0.") and http.members[0].internal_url is None


def test_ring_version_bumps_only_when_membership_changes():
    c3 = ctx(shards=3)
    cm = build_plan_configmap(c3, next_plan(c3, [], None)[0])
    same = next_plan(ctx(shards=3, router={"gamma": 0.3}), [], previous_plan(cm))[0]
    assert same.ring_version == 1 and same.router.gamma == 0.3
    grown = next_plan(ctx(shards=5), [], previous_plan(cm))[0]
    assert grown.ring_version == 2 and len(grown.members) == 5


def test_adapter_placement_by_replicas_is_stable_and_by_shards_is_explicit():
    ids = ["demo-0", "demo-1", "demo-2"]
    spec = LoRAAdapterSpec.model_validate(
        {"clusterRef": {"name": "demo"}, "domain": "legal", "source": "s", "placement": {"replicas": 2}}
    )
    first = place_adapter("legal", spec, ids, 2048, 0)
    assert len(first.shards) == 2 and set(first.shards) <= set(ids)
    assert place_adapter("legal", spec, ids, 2048, 0) == first
    explicit = LoRAAdapterSpec.model_validate(
        {
            "clusterRef": {"name": "demo"},
            "domain": "legal",
            "source": "s",
            "placement": {"shards": ["demo-2", "demo-9"]},
        }
    )
    placed = place_adapter("legal", explicit, ids, 2048, 0)
    assert placed.shards == ("demo-2",) and placed.missing == ("demo-9",)


def test_tls_secret_has_a_ca_and_a_certificate_per_shard_and_reuses_them():
    c = ctx()
    secret = build_tls_secret(c, CA, 3, None)
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert set(data) == {"ca.crt", *(f"demo-{i}.{ext}" for i in range(3) for ext in ("crt", "key"))}
    cert = x509.load_pem_x509_certificate(data["demo-1.crt"])
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(CA[0]))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName
    )
    assert "demo-1.demo-headless.prod.svc" in sans and "demo.prod.svc" in sans
    grown = build_tls_secret(c, CA, 4, secret)
    assert grown["data"]["demo-1.crt"] == secret["data"]["demo-1.crt"]  # running shards keep their identity
    assert "demo-3.crt" in grown["data"]
    other_ca = generate_ca("demo")
    assert build_tls_secret(c, other_ca, 3, secret)["data"]["demo-0.crt"] != secret["data"]["demo-0.crt"]


def test_ca_material_is_reused_from_the_ca_secret():
    secret = children(ctx()).apply[1]
    assert secret["metadata"]["name"] == "demo-ca"
    assert ca_material(secret, "demo") == CA


def test_turned_off_features_are_listed_for_removal():
    built = children(
        ctx(tls={"enabled": False}, monitoring={"serviceMonitor": False}, auth={"enabled": False})
    )
    assert {(r.kind, r.name) for r in built.remove} == {
        ("Secret", "demo-tls"),
        ("Secret", "demo-ca"),
        ("Secret", "demo-api-keys"),
        ("ServiceMonitor", "demo"),
    }
    assert [m["metadata"]["name"] for m in built.apply if m["kind"] == "Secret"] == ["demo-gossip"]


def test_plan_json_is_deterministic_for_equal_inputs():
    a = next_plan(ctx(), [], None)[0].to_json()
    assert a == next_plan(ctx(), [], None)[0].to_json()
    assert json.loads(a)["ring"]["vnodes"] == 2048


def test_draining_shards_stay_members_but_leave_the_ring():
    c = ctx(shards=3)
    five = next_plan(ctx(shards=5), [], None)[0]
    draining, _ = next_plan(c, [], five, members=5, draining=["demo-3", "demo-4"])
    assert [m.shard_id for m in draining.members] == [f"demo-{i}" for i in range(5)]
    assert draining.draining == ("demo-3", "demo-4")
    assert draining.ring_spec.shards == ("demo-0", "demo-1", "demo-2")
    assert draining.ring_version == 2 and draining.previous_ring["shards"][-1] == "demo-4"
    final, _ = next_plan(c, [], draining)
    assert [m.shard_id for m in final.members] == ["demo-0", "demo-1", "demo-2"]
    assert final.ring_version == 2 and final.draining == ()


def test_gossip_secret_is_generated_once_and_kept():
    from themis_operator.builders.gossip import build_gossip_secret

    first = build_gossip_secret(ctx(), None)
    assert len(base64.b64decode(first["data"]["secret"])) == 64
    assert build_gossip_secret(ctx(), first)["data"] == first["data"]
    assert build_gossip_secret(ctx(), None)["data"] != first["data"]


@pytest.mark.parametrize(("given", "stored"), [("2", "2"), ("0.5", "500m"), ("1.0", "1"), ("250m", "250m")])
def test_cpu_quantities_are_written_the_way_the_api_server_stores_them(given, stored):
    from themis_operator.builders.statefulset import canonical_cpu

    assert canonical_cpu(given) == stored


def test_speculative_decoding_settings_reach_every_shard():
    engine = {
        "speculativeSource": "remote",
        "draftShard": "auto",
        "speculativeDefault": True,
        "serveDrafts": True,
    }
    env = env_of(build_statefulset(ctx(engine=engine, draftModel={"source": "pvc://models/draft.gguf"}), 3))
    assert env["THEMIS_LLM_SPECULATIVE_SOURCE"] == "remote"  # said explicitly: not the local default
    assert env["THEMIS_LLM_DRAFT_SHARD"] == "auto" and env["THEMIS_LLM_SERVE_DRAFTS"] == "true"
    assert env["THEMIS_LLM_SPECULATIVE_DEFAULT"] == "true"
    plain = env_of(build_statefulset(ctx(), 3))
    assert not {"THEMIS_LLM_SPECULATIVE_SOURCE", "THEMIS_LLM_DRAFT_SHARD", "THEMIS_LLM_SERVE_DRAFTS"} & set(
        plain
    )


def test_speculative_sources_without_their_draft_are_reported():
    assert ctx(engine={"speculativeSource": "remote"}).spec.problems() == [
        'spec.engine.speculativeSource remote needs spec.engine.draftShard (a shard or "auto")'
    ]
    assert ctx(engine={"speculativeSource": "local"}).spec.problems() == [
        "spec.engine.speculativeSource local needs spec.draftModel"
    ]


def test_leaf_certificates_are_renewed_at_two_thirds_of_their_lifetime():
    c = ctx()
    first = build_tls_secret(c, CA, 2, None)
    cert = x509.load_pem_x509_certificate(base64.b64decode(first["data"]["demo-0.crt"]))
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    before = start + (end - start) * 0.66
    after = start + (end - start) * 0.67
    assert build_tls_secret(c, CA, 2, first, now=before)["data"] == first["data"]
    renewed = build_tls_secret(c, CA, 2, first, now=after)["data"]
    assert (
        renewed["demo-0.crt"] != first["data"]["demo-0.crt"] and renewed["ca.crt"] == first["data"]["ca.crt"]
    )
