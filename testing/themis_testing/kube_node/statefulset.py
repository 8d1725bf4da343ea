"""What a StatefulSet wants: pods ``NAME-0..N-1`` and their PVCs, and the next step (pure).

Follows the StatefulSet controller's rules that our manifests rely on:

* pod ``NAME-i`` gets the template's labels plus ``statefulset.kubernetes.io/pod-name`` and
  ``controller-revision-hash``, ``hostname: NAME-i`` and ``subdomain: serviceName`` (so the
  headless Service's DNS name ``NAME-i.SERVICE.NS.svc`` exists), and a controller ownerReference;
* each ``volumeClaimTemplates`` entry ``T`` becomes PVC ``T-NAME-i``, created before its pod and
  never deleted by scale-in (``persistentVolumeClaimRetentionPolicy`` Retain is the only policy
  honoured; Delete is refused by name in :func:`problems`);
* ``OrderedReady``: create ``i`` only when ``0..i-1`` are Running and Ready, remove the highest
  ordinal first, one at a time; ``Parallel``: all at once;
* ``RollingUpdate``: when the template changed, delete the highest-ordinal pod of an old
  revision at or above ``rollingUpdate.partition`` once every pod is ready (its replacement is
  created from the new template); pods below the partition keep their revision, and the status
  reports ``currentRevision`` (the old one) until every pod runs ``updateRevision``;
* a missing pod (deleted, or failed) is created again.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
REVISION_LABEL = "controller-revision-hash"


def revision(sts: Mapping) -> str:
    """A stable hash of the pod template (the controller-revision-hash label's value)."""
    blob = json.dumps(sts["spec"]["template"], sort_keys=True).encode()
    return f"{sts['metadata']['name']}-{hashlib.sha256(blob).hexdigest()[:10]}"


def problems(sts: Mapping) -> list[str]:
    """Fields this node cannot honour, by name (the StatefulSet is then left alone)."""
    spec = sts.get("spec") or {}
    found = []
    policy = spec.get("persistentVolumeClaimRetentionPolicy") or {}
    for when in ("whenDeleted", "whenScaled"):
        if policy.get(when, "Retain") != "Retain":
            found.append(f"persistentVolumeClaimRetentionPolicy.{when}={policy[when]} is not supported")
    strategy = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate")
    if strategy not in ("RollingUpdate", "OnDelete"):
        found.append(f"updateStrategy.type={strategy} is not supported")
    return found


def partition(sts: Mapping) -> int:
    return int(
        (((sts.get("spec") or {}).get("updateStrategy") or {}).get("rollingUpdate") or {}).get("partition")
        or 0
    )


def claim_name(template: Mapping, sts_name: str, ordinal: int) -> str:
    return f"{template['metadata']['name']}-{sts_name}-{ordinal}"


def _owner(sts: Mapping) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": sts["metadata"]["name"],
        "uid": sts["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_manifest(sts: Mapping, ordinal: int) -> dict:
    name = f"{sts['metadata']['name']}-{ordinal}"
    template = copy.deepcopy(sts["spec"]["template"])
    meta = template.get("metadata") or {}
    spec = template["spec"]
    claims = {t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates") or []}
    volumes = [v for v in spec.get("volumes") or [] if v["name"] not in claims]
    for t in sts["spec"].get("volumeClaimTemplates") or []:
        volumes.append(
            {
                "name": t["metadata"]["name"],
                "persistentVolumeClaim": {"claimName": claim_name(t, sts["metadata"]["name"], ordinal)},
            }
        )
    spec["volumes"] = volumes
    spec["hostname"] = name
    if sts["spec"].get("serviceName"):
        spec["subdomain"] = sts["spec"]["serviceName"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": sts["metadata"]["namespace"],
            "labels": {**(meta.get("labels") or {}), POD_NAME_LABEL: name, REVISION_LABEL: revision(sts)},
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [_owner(sts)],
        },
        "spec": spec,
    }


def claim_manifests(sts: Mapping, ordinal: int) -> list[dict]:
    out = []
    for t in sts["spec"].get("volumeClaimTemplates") or []:
        labels = dict((t.get("metadata") or {}).get("labels") or {})
        labels.update(sts["spec"].get("selector", {}).get("matchLabels") or {})
        out.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": claim_name(t, sts["metadata"]["name"], ordinal),
                    "namespace": sts["metadata"]["namespace"],
                    "labels": labels,
                },
                "spec": copy.deepcopy(t["spec"]),
            }
        )
    return out


def ordinal_of(sts_name: str, pod_name: str) -> int | None:
    head, _, tail = pod_name.rpartition("-")
    return int(tail) if head == sts_name and tail.isdigit() else None


def is_ready(pod: Mapping) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )


@dataclass
class Step:
    create_claims: list[dict] = field(default_factory=list)
    create_pods: list[dict] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)


def decide(sts: Mapping, pods: Sequence[Mapping], claims: Sequence[str]) -> Step:
    """The next actions for ``sts`` given its current pods and the PVC names in its namespace."""
    name = sts["metadata"]["name"]
    spec = sts["spec"]
    replicas = int(spec.get("replicas", 1))
    ordered = spec.get("podManagementPolicy", "OrderedReady") == "OrderedReady"
    rolling = (spec.get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate"
    by_ordinal = {o: p for p in pods if (o := ordinal_of(name, p["metadata"]["name"])) is not None}
    step = Step()
    existing_claims = set(claims)
    for i in range(replicas):
        if i in by_ordinal:
            continue
        if ordered and not all(j in by_ordinal and is_ready(by_ordinal[j]) for j in range(i)):
            break
        step.create_claims += [
            c for c in claim_manifests(sts, i) if c["metadata"]["name"] not in existing_claims
        ]
        step.create_pods.append(pod_manifest(sts, i))
    extra = sorted((o for o in by_ordinal if o >= replicas), reverse=True)
    if extra:
        step.delete_pods = [by_ordinal[o]["metadata"]["name"] for o in (extra[:1] if ordered else extra)]
        return step
    current = revision(sts)
    if rolling and not step.create_pods and all(is_ready(p) for p in by_ordinal.values()):
        stale = [
            o
            for o, p in by_ordinal.items()
            if o >= partition(sts) and p["metadata"].get("labels", {}).get(REVISION_LABEL) != current
        ]
        if stale:
            step.delete_pods = [by_ordinal[max(stale)]["metadata"]["name"]]
    return step


def status(sts: Mapping, pods: Sequence[Mapping]) -> dict:
    """The StatefulSet's status subresource from its pods."""
    name, current = sts["metadata"]["name"], revision(sts)
    mine = [p for p in pods if ordinal_of(name, p["metadata"]["name"]) is not None]
    updated = [p for p in mine if p["metadata"].get("labels", {}).get(REVISION_LABEL) == current]
    ready = sum(1 for p in mine if is_ready(p))
    old = sorted({p["metadata"].get("labels", {}).get(REVISION_LABEL) for p in mine} - {current} - {None})
    current_revision = old[0] if old else current
    on_current = [p for p in mine if p["metadata"].get("labels", {}).get(REVISION_LABEL) == current_revision]
    return {
        "observedGeneration": sts["metadata"].get("generation", 1),
        "replicas": len(mine),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "currentReplicas": len(on_current),
        "updatedReplicas": len(updated),
        "currentRevision": current_revision,
        "updateRevision": current,
        "collisionCount": 0,
    }
