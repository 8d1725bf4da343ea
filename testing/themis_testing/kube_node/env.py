"""A container's environment from its pod spec, as the kubelet builds it (pure).

Order and precedence follow Kubernetes: the image's ENV first, then ``envFrom`` sources in
order, then ``env`` entries in order (later wins). ``$(VAR)`` in a value expands to a variable
defined *before* it (image ENV included); ``$$`` is a literal ``$``; an undefined reference stays
as written. ``command`` and ``args`` expand against the whole final environment. Anything the
node cannot resolve — an unknown ``fieldPath``, a missing ConfigMap/Secret or key that is not
``optional``, ``resourceFieldRef`` — raises :class:`ConfigError`, which the kubelet reports as
``CreateContainerConfigError`` (as a real kubelet does), never an empty value.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


class ConfigError(ValueError):
    """The pod spec cannot be turned into a process environment."""


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion against ``env``."""

    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _REF.sub(sub, value)


@dataclass(frozen=True)
class PodFacts:
    """What fieldRefs may read about the pod."""

    name: str
    namespace: str
    uid: str = ""
    pod_ip: str = ""
    node_name: str = ""
    service_account: str = "default"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    def field(self, path: str) -> str:
        simple = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.uid,
            "status.podIP": self.pod_ip,
            "status.hostIP": self.pod_ip,
            "spec.nodeName": self.node_name,
            "spec.serviceAccountName": self.service_account,
        }
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if m:
            source = self.labels if m.group(1) == "labels" else self.annotations
            return source.get(m.group(2), "")
        raise ConfigError(f"fieldRef {path!r} is not supported by this node")


def _data(obj: Mapping | None, kind: str) -> dict[str, str]:
    """A ConfigMap's or Secret's string data (Secret ``data`` is base64)."""
    if obj is None:
        return {}
    if kind == "Secret":
        out = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
        out.update(obj.get("stringData") or {})
        return out
    return dict(obj.get("data") or {})


def _key_ref(ref: Mapping, kind: str, objects: Mapping[str, Mapping]) -> str | None:
    name, key, optional = ref.get("name", ""), ref["key"], bool(ref.get("optional"))
    obj = objects.get(name)
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'{kind.lower()} "{name}" not found')
    data = _data(obj, kind)
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {obj['metadata'].get('namespace')}/{name}")
    return data[key]


def container_env(
    container: Mapping,
    pod: PodFacts,
    image_env: Mapping[str, str],
    configmaps: Mapping[str, Mapping],
    secrets: Mapping[str, Mapping],
) -> dict[str, str]:
    """The process environment of ``container`` (names → values, image ENV included)."""
    env: dict[str, str] = dict(image_env)
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, key, objects in (
            ("ConfigMap", "configMapRef", configmaps),
            ("Secret", "secretRef", secrets),
        ):
            if key not in source:
                continue
            ref = source[key]
            obj = objects.get(ref.get("name", ""))
            if obj is None and not ref.get("optional"):
                raise ConfigError(f'{kind.lower()} "{ref.get("name")}" not found')
            for k, v in _data(obj, kind).items():
                env[prefix + k] = v
    for entry in container.get("env") or []:
        name = entry["name"]
        if "value" in entry or "valueFrom" not in entry:
            env[name] = expand(str(entry.get("value", "")), env)
            continue
        src = entry["valueFrom"]
        if "fieldRef" in src:
            value: str | None = pod.field(src["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in src:
            value = _key_ref(src["secretKeyRef"], "Secret", secrets)
        elif "configMapKeyRef" in src:
            value = _key_ref(src["configMapKeyRef"], "ConfigMap", configmaps)
        else:
            raise ConfigError(f"env {name}: valueFrom {sorted(src)} is not supported by this node")
        if value is not None:
            env[name] = value
    return env


def container_argv(
    container: Mapping, entrypoint: list[str], cmd: list[str], env: Mapping[str, str]
) -> list[str]:
    """argv as the runtime builds it: ``command`` replaces ENTRYPOINT (and drops CMD), ``args`` CMD."""
    if container.get("command"):
        argv = list(container["command"]) + list(container.get("args") or [])
    else:
        argv = list(entrypoint) + list(container.get("args", cmd))
    if not argv:
        raise ConfigError("no command specified (neither the container nor the image has one)")
    return [expand(str(a), env) for a in argv]
