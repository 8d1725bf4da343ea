"""A pod of the operator's StatefulSet, rendered for ``image_runtime`` (pure functions).

The image e2e (``themis_testing.image_e2e``) runs a shard pod from the real image the way a kubelet
would: the container's env from the pod template (``value``, ``fieldRef`` to the pod's name and
namespace, ``secretKeyRef`` and ``configMapKeyRef``, ``$(VAR)`` references to earlier variables),
its ConfigMap and Secret volumes as files, its PersistentVolumeClaims as directories. The local
node's kubelet (``themis_testing.kube_node``) does the same for every pod it runs; this is the
smallest part of that which one pod needs, so the image e2e does not depend on the node.
Anything else in a template is refused by name (``PodRenderError``), never skipped.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass

_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class PodRenderError(ValueError):
    """A template field this renderer does not implement, or a reference that does not resolve."""


@dataclass(frozen=True, slots=True)
class RenderedVolume:
    """``files`` (name → bytes) for ConfigMap/Secret volumes; ``claim`` for PVC-backed ones."""

    mount_path: str
    read_only: bool
    files: Mapping[str, bytes] | None = None
    claim: str | None = None


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)``: a defined variable is substituted, an undefined one left as is."""
    return _REF.sub(lambda m: env.get(m.group(1), m.group(0)), value)


def pod_env(
    container: Mapping,
    *,
    pod_name: str,
    namespace: str,
    secrets: Mapping[str, Mapping],
    configmaps: Mapping[str, Mapping],
) -> dict[str, str]:
    """The container's ``env`` in order (later entries may reference earlier ones)."""
    if container.get("envFrom"):
        raise PodRenderError("envFrom is not supported by the image e2e's renderer")
    fields = {"metadata.name": pod_name, "metadata.namespace": namespace}
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
            continue
        source = item.get("valueFrom") or {}
        if ref := source.get("fieldRef"):
            path = ref.get("fieldPath")
            if path not in fields:
                raise PodRenderError(f"env {name}: fieldRef {path} is not supported")
            env[name] = fields[path]
        elif ref := source.get("secretKeyRef"):
            data = (secrets.get(ref["name"]) or {}).get("data") or {}
            if ref["key"] not in data:
                raise PodRenderError(f"env {name}: secret {ref['name']} has no key {ref['key']}")
            env[name] = base64.b64decode(data[ref["key"]]).decode()
        elif ref := source.get("configMapKeyRef"):
            data = (configmaps.get(ref["name"]) or {}).get("data") or {}
            if ref["key"] not in data:
                raise PodRenderError(f"env {name}: configmap {ref['name']} has no key {ref['key']}")
            env[name] = data[ref["key"]]
        else:
            raise PodRenderError(f"env {name}: valueFrom {sorted(source)} is not supported")
    return env


def pod_volumes(
    pod_spec: Mapping,
    container: Mapping,
    claim_templates: list[Mapping],
    *,
    pod_name: str,
    secrets: Mapping[str, Mapping],
    configmaps: Mapping[str, Mapping],
) -> list[RenderedVolume]:
    """Every volumeMount of ``container``, resolved against the pod's volumes and claim templates."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    templates = {t["metadata"]["name"] for t in claim_templates}
    out: list[RenderedVolume] = []
    for mount in container.get("volumeMounts") or []:
        if mount.get("subPath") or mount.get("subPathExpr"):
            raise PodRenderError(f"volumeMount {mount['name']}: subPath is not supported")
        name, read_only = mount["name"], bool(mount.get("readOnly"))
        if name in templates:  # a StatefulSet's per-pod claim: <template>-<pod>
            out.append(RenderedVolume(mount["mountPath"], read_only, claim=f"{name}-{pod_name}"))
            continue
        volume = volumes.get(name)
        if volume is None:
            raise PodRenderError(f"volumeMount {name} names no volume or claim template")
        if cm := volume.get("configMap"):
            data = (configmaps.get(cm["name"]) or {}).get("data")
            if data is None:
                raise PodRenderError(f"volume {name}: configmap {cm['name']} not found")
            files = {k: v.encode() for k, v in data.items()}
        elif secret := volume.get("secret"):
            data = (secrets.get(secret["secretName"]) or {}).get("data")
            if data is None:
                raise PodRenderError(f"volume {name}: secret {secret['secretName']} not found")
            files = {k: base64.b64decode(v) for k, v in data.items()}
        elif pvc := volume.get("persistentVolumeClaim"):
            out.append(RenderedVolume(mount["mountPath"], read_only, claim=pvc["claimName"]))
            continue
        else:
            kinds = sorted(set(volume) - {"name"})
            raise PodRenderError(f"volume {name}: {kinds} is not supported")
        out.append(RenderedVolume(mount["mountPath"], True, files=files))
    return out
