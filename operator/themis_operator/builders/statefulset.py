"""The shards' StatefulSet: one pod per shard, stable identity, data + weights volumes.

A change to any field here changes the pod template, which the StatefulSet rolls out pod by
pod (RollingUpdate) — that is how spec updates reach running shards. The cluster plan is
deliberately *not* hashed into the template: shards reload it from the mounted ConfigMap, so
a scale event never restarts the shards that stay.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from .. import names
from ..backups import restore_env
from ..spec import PVC_SOURCE, ModelRef, ThemisClusterSpec
from .auth import DIGESTS as API_KEY_DIGESTS
from .auth import tenant_policies
from .context import ClusterContext
from .gossip import KEY as GOSSIP_KEY

PLAN_DIR = "/etc/themis/plan"
TLS_DIR = "/etc/themis/tls"
AUTH_DIR = "/etc/themis/auth"
DATA_DIR = "/data"
WEIGHTS_DIR = "/weights"
#: RAID units on the weights volume (a wiped volume is rebuilt from the peers at start-up).
RAID_DIR = f"{WEIGHTS_DIR}/raid"
#: Caches that must outlive a pod but not a volume (embedding GGUF conversion, CPU probe).
CACHE_DIR = f"{WEIGHTS_DIR}/cache"
MODELS_DIR = "/models"
#: ``pvc://`` LoRA adapter claims, mounted read-only under ``/adapters/<claim>``.
ADAPTERS_DIR = "/adapters"
TMP_DIR = "/tmp"
#: Where a failing shard writes why (Kubernetes shows it in the pod's lastState).
TERMINATION_LOG = "/dev/termination-log"
#: The image's user (Dockerfile.shard): Pod Security "restricted" needs a non-root uid.
UID = 1000
GPU_RESOURCE = "nvidia.com/gpu"


def _model_location(ref: ModelRef) -> str:
    """What the shard's ``*_MODEL_PATH`` setting gets: 'bundled', a mounted path, or a URL."""
    if ref.kind == "pvc":
        claim, path = ref.pvc
        return f"{MODELS_DIR}/{claim}/{path}"
    return ref.source


def _model_claims(spec: ThemisClusterSpec) -> list[str]:
    refs = [spec.model, spec.draft_model, spec.embedding_model]
    return list(dict.fromkeys(r.pvc[0] for r in refs if r is not None and r.kind == "pvc"))


def _operator_env(ctx: ClusterContext) -> list[dict]:
    spec = ctx.spec

    def var(name: str, value: object) -> dict:
        return {"name": name, "value": str(value).lower() if isinstance(value, bool) else str(value)}

    env = [
        {"name": "THEMIS_SHARD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        var("THEMIS_HOST", "0.0.0.0"),
        var("THEMIS_PORT", names.PORT),
        var("THEMIS_DATA_DIR", DATA_DIR),
        var("THEMIS_WEIGHTS_DIR", WEIGHTS_DIR),
        var("THEMIS_PLAN_PATH", f"{PLAN_DIR}/plan.json"),
        {
            "name": "THEMIS_CLUSTER_GOSSIP_SECRET",
            "valueFrom": {"secretKeyRef": {"name": names.gossip_secret(ctx.name), "key": GOSSIP_KEY}},
        },
        var("THEMIS_USE_GPU", spec.resources.gpus > 0),
        var("THEMIS_TERMINATION_MESSAGE_PATH", TERMINATION_LOG),
        var("THEMIS_LLM_ENABLED", spec.engine.llm),
        # The root filesystem is read-only: writable caches live on the weights volume.
        var("THEMIS_LLM_EMBEDDING_CACHE_DIR", f"{CACHE_DIR}/embedding"),
        var("THEMIS_LLM_PROBE_CACHE_DIR", f"{CACHE_DIR}/cpu-probe"),
        var("THEMIS_LLM_MODEL_ALIAS", spec.model.alias or "gemma3-270m"),
        var("THEMIS_LLM_MODEL_PATH", _model_location(spec.model)),
        var("THEMIS_LLM_N_CTX", spec.model.context_size),
        var("THEMIS_LLM_N_GPU_LAYERS", -1 if spec.resources.gpus > 0 else 0),
        var("THEMIS_LLM_MAX_BATCH_SIZE", spec.engine.max_batch_size),
        var("THEMIS_LLM_MAX_CONCURRENT_REQUESTS", spec.engine.max_concurrent_requests),
        var("THEMIS_LLM_MAX_TOKENS_PER_BATCH", spec.engine.max_tokens_per_batch),
        var("THEMIS_LLM_CHUNKED_PREFILL_SIZE", spec.engine.chunked_prefill_size),
        var("THEMIS_LLM_N_DRAFT", spec.engine.n_draft),
        var("THEMIS_LOG_LEVEL", spec.logging.level),
        var("THEMIS_LOG_FORMAT", spec.logging.format),
    ]
    if spec.model.sha256:
        env.append(var("THEMIS_LLM_MODEL_SHA256", spec.model.sha256))
    if spec.raid_weights:
        env += [var("THEMIS_RAID_ENABLED", True), var("THEMIS_RAID_WEIGHTS_DIR", RAID_DIR)]
    eng = spec.engine
    source = eng.speculative_source or ("local" if spec.draft_model is not None else None)
    if source:  # a draft model on every shard and nothing else said: speculate with it locally
        env.append(var("THEMIS_LLM_SPECULATIVE_SOURCE", source))
    if eng.speculative_default:
        env.append(var("THEMIS_LLM_SPECULATIVE_DEFAULT", True))
    if eng.draft_shard:
        env.append(var("THEMIS_LLM_DRAFT_SHARD", eng.draft_shard))
    if eng.serve_drafts:
        env.append(var("THEMIS_LLM_SERVE_DRAFTS", True))
    for prefix, ref in (("DRAFT", spec.draft_model), ("EMBEDDING", spec.embedding_model)):
        if ref is None:
            continue
        # The engine's embedding setting is THEMIS_LLM_EMBEDDING_MODEL ("bundled", "none" or a path).
        path_var = (
            "THEMIS_LLM_EMBEDDING_MODEL" if prefix == "EMBEDDING" else f"THEMIS_LLM_{prefix}_MODEL_PATH"
        )
        env.append(var(path_var, _model_location(ref)))
        if ref.sha256:
            env.append(var(f"THEMIS_LLM_{prefix}_MODEL_SHA256", ref.sha256))
    if spec.auth.enabled:  # API keys: the shards see only the digests
        env += [
            var("THEMIS_AUTH_ENABLED", True),
            var("THEMIS_AUTH_KEYS_FILE", f"{AUTH_DIR}/{API_KEY_DIGESTS}"),
        ]
    if spec.tls.enabled:
        # One Secret holds every shard's pair; each pod picks its own by name ($(VAR) expands
        # variables defined earlier in the list, here THEMIS_SHARD_ID).
        env += [
            var("THEMIS_INTERNAL_PORT", names.INTERNAL_PORT),
            var("THEMIS_TLS_CA_PATH", f"{TLS_DIR}/ca.crt"),
            var("THEMIS_TLS_CERT_PATH", f"{TLS_DIR}/$(THEMIS_SHARD_ID).crt"),
            var("THEMIS_TLS_KEY_PATH", f"{TLS_DIR}/$(THEMIS_SHARD_ID).key"),
        ]
    env += restore_env(spec.bootstrap)  # spec.bootstrap.fromBackup: each shard restores its part
    return env


def _env(ctx: ClusterContext) -> list[dict]:
    # spec.env last: its values may refer to the operator's variables as $(NAME).
    return _operator_env(ctx) + [v.manifest() for v in ctx.spec.env]


def env_conflicts(ctx: ClusterContext) -> list[str]:
    """``spec.env`` entries that would override a variable the operator sets (refused by name:
    each has a spec field, or is the operator's to manage)."""
    managed = {e["name"] for e in _operator_env(ctx)}
    return [
        f"spec.env[{i}].name {v.name} is set by the operator (use the ThemisCluster field for it)"
        for i, v in enumerate(ctx.spec.env)
        if v.name in managed
    ]


def canonical_cpu(quantity: str) -> str:
    """CPU as the API server stores it ("0.5" → "500m", "2.0" → "2"), so re-applying is a no-op."""
    if quantity.endswith("m") or "." not in quantity:
        return quantity
    millis = round(float(quantity) * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _resources(spec: ThemisClusterSpec) -> dict:
    r = spec.resources
    requests: dict[str, str] = {"cpu": canonical_cpu(r.cpu), "memory": r.memory}
    limits: dict[str, str] = {"memory": r.memory_limit or r.memory}
    if r.cpu_limit:
        limits["cpu"] = canonical_cpu(r.cpu_limit)
    if r.gpus > 0:
        # Extended resources must be equal in requests and limits.
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(r.gpus)
    return {"requests": requests, "limits": limits}


def _tolerations(spec: ThemisClusterSpec) -> list[dict]:
    tolerations = [dict(t) for t in spec.resources.tolerations]
    tolerations += [dict(t) for t in spec.tolerations if dict(t) not in tolerations]
    if spec.resources.gpus > 0 and not any(t.get("key") == GPU_RESOURCE for t in tolerations):
        # GPU node pools are usually tainted nvidia.com/gpu:NoSchedule.
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _probe(path: str, scheme: str, period: int, failures: int) -> dict:
    return {
        "httpGet": {"path": path, "port": "http", "scheme": scheme},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


#: Pod Security "restricted": non-root, no privilege escalation, no capabilities, RuntimeDefault
#: seccomp; the root filesystem is read-only (writes go to the volumes and an emptyDir /tmp).
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": UID,
    "runAsGroup": UID,
    "fsGroup": UID,
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def _tenants_annotation(ctx: ClusterContext) -> dict[str, str]:
    """A digest of the tenants' limits on the pod template: shards read the keys file at start,
    so changing ``spec.auth.tenants`` rolls them (one at a time, as any template change)."""
    policies = tenant_policies(ctx) if ctx.spec.auth.enabled else []
    if not policies:
        return {}
    text = "\n".join(p.line() for p in policies)
    return {"themisdb.io/tenants": hashlib.sha256(text.encode()).hexdigest()[:16]}


def _claim(name: str, size: str, storage_class: str | None, component: str, ctx: ClusterContext) -> dict:
    spec: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name, "labels": names.labels(ctx.name, component)}, "spec": spec}


def adapter_location(source: str) -> tuple[str | None, str]:
    """``(claim, path in the pod)`` of a LoRA adapter source: ``pvc://`` claims are mounted
    under ADAPTERS_DIR; other sources (http(s), a path on the weights volume) pass through."""
    m = PVC_SOURCE.match(source)
    if m is None:
        return None, source
    return m["claim"], f"{ADAPTERS_DIR}/{m['claim']}/{m['path']}"


def build_statefulset(
    ctx: ClusterContext, replicas: int, adapter_claims: Sequence[str] = (), partition: int = 0
) -> dict:
    """``replicas`` may exceed ``spec.shards`` while leaving shards hand off their data.

    ``adapter_claims`` (the cluster's ``pvc://`` LoRA adapters) are mounted into every pod, not
    only the ones the placement chose: a StatefulSet has one pod template, and a placement that
    moves (scaling, a new replica count) must not restart pods. Such claims must therefore be
    ReadOnlyMany when the shards run on several nodes.
    """
    spec = ctx.spec
    scheme = "HTTPS" if spec.tls.enabled else "HTTP"
    mounts = [
        {"name": "data", "mountPath": DATA_DIR},
        {"name": "weights", "mountPath": WEIGHTS_DIR},
        {"name": "plan", "mountPath": PLAN_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": TMP_DIR},
    ]
    volumes: list[dict] = [
        {"name": "plan", "configMap": {"name": names.plan_configmap(ctx.name)}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if spec.tls.enabled:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
        volumes.append(
            {"name": "tls", "secret": {"secretName": names.tls_secret(ctx.name), "defaultMode": 0o400}}
        )
    if spec.auth.enabled:
        mounts.append({"name": "api-keys", "mountPath": AUTH_DIR, "readOnly": True})
        volumes.append(
            {
                "name": "api-keys",
                "secret": {
                    "secretName": names.api_keys_secret(ctx.name),
                    "items": [{"key": API_KEY_DIGESTS, "path": API_KEY_DIGESTS}],
                    "defaultMode": 0o400,
                },
            }
        )
    for i, claim in enumerate(_model_claims(spec)):
        mounts.append({"name": f"models-{i}", "mountPath": f"{MODELS_DIR}/{claim}", "readOnly": True})
        volumes.append(
            {"name": f"models-{i}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
    for i, claim in enumerate(sorted(set(adapter_claims))):
        mounts.append({"name": f"adapters-{i}", "mountPath": f"{ADAPTERS_DIR}/{claim}", "readOnly": True})
        volumes.append(
            {"name": f"adapters-{i}", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )

    container = {
        "name": "shard",
        "image": ctx.image,
        "imagePullPolicy": spec.image_pull_policy,
        "command": ["themis-shard"],
        "ports": [{"name": "http", "containerPort": names.PORT, "protocol": "TCP"}]
        + (
            [{"name": "internal", "containerPort": names.INTERNAL_PORT, "protocol": "TCP"}]
            if spec.tls.enabled
            else []
        ),
        "env": _env(ctx),
        "resources": _resources(spec),
        "volumeMounts": mounts,
        "readinessProbe": _probe("/ready", scheme, 5, 3),
        "livenessProbe": _probe("/health", scheme, 10, 6),
        # Loading (or fetching) the model can take minutes; liveness waits for this.
        "startupProbe": _probe("/health", scheme, 10, 90),
        # The shard writes why it could not start there; without it, the log tail is shown.
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": CONTAINER_SECURITY,
    }
    pod_spec: dict = {
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": 60,
        "securityContext": POD_SECURITY,
        "affinity": {
            "podAntiAffinity": {
                # Preferred, not required: a one-node dev cluster must still schedule; on real
                # clusters this spreads shards so one node failure costs one RAID member.
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": names.selector_labels(ctx.name)},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        },
    }
    if tolerations := _tolerations(spec):
        pod_spec["tolerations"] = tolerations
    if node_selector := {**spec.resources.node_selector, **spec.node_selector}:
        pod_spec["nodeSelector"] = node_selector
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": r.name} for r in spec.image_pull_secrets]
    if spec.priority_class_name:
        pod_spec["priorityClassName"] = spec.priority_class_name

    storage = spec.storage
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": ctx.metadata(names.statefulset(ctx.name), "shard"),
        "spec": {
            "replicas": replicas,
            "serviceName": names.headless_service(ctx.name),
            "podManagementPolicy": "Parallel",
            # The operator moves the partition (reconcile/rollout.py): one shard at a time, each
            # step gated on readiness and replication catch-up.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}},
            # Data outlives scale-in and deletion: handing it off is the shards' job, and a
            # deleted cluster can be recreated over its volumes.
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "selector": {"matchLabels": names.selector_labels(ctx.name)},
            "template": {
                "metadata": {
                    "labels": names.labels(ctx.name, "shard"),
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(names.PORT),
                        "prometheus.io/path": "/metrics",
                        "prometheus.io/scheme": scheme.lower(),
                        **_tenants_annotation(ctx),
                        **spec.pod_annotations,
                    },
                },
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [
                _claim("data", storage.data_size, storage.storage_class_name, "shard", ctx),
                _claim("weights", storage.weights_size, storage.storage_class_name, "shard", ctx),
            ],
        },
    }
