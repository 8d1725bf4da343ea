"""An in-memory ``Kube`` for fast reconcile tests: no HTTP, no kopf, same semantics we rely on."""

from __future__ import annotations

import copy
import itertools
import uuid

from themis_operator.kube import Conflict

from .merge import merge_patch


class FakeKube:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], dict] = {}
        self.writes: list[tuple[str, str, str]] = []  # (verb, kind, name): to assert idempotency
        self._rv = itertools.count(1)

    def _key(self, api_version: str, kind: str, namespace: str, name: str) -> tuple[str, str, str, str]:
        return (api_version, kind, namespace, name)

    def get(self, api_version, kind, namespace, name):
        obj = self.objects.get(self._key(api_version, kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, api_version, kind, namespace, label_selector=None):
        wanted = dict(p.split("=", 1) for p in label_selector.split(",")) if label_selector else {}
        out = []
        for (av, k, ns, _), obj in sorted(self.objects.items()):
            labels = obj.get("metadata", {}).get("labels") or {}
            if (av, k, ns) == (api_version, kind, namespace) and all(
                labels.get(a) == b for a, b in wanted.items()
            ):
                out.append(copy.deepcopy(obj))
        return out

    def create(self, obj):
        meta = obj["metadata"]
        key = self._key(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if key in self.objects:
            raise Conflict(f"{key} exists")
        stored = copy.deepcopy(obj)
        stored["metadata"].update(uid=str(uuid.uuid4()), resourceVersion=str(next(self._rv)), generation=1)
        self.objects[key] = stored
        self.writes.append(("create", obj["kind"], meta["name"]))
        return copy.deepcopy(stored)

    def patch(self, api_version, kind, namespace, name, patch, subresource=None):
        key = self._key(api_version, kind, namespace, name)
        if key not in self.objects:
            raise KeyError(key)
        if subresource == "status":
            patch = {"status": patch.get("status")}
        old = self.objects[key]
        expected = (patch.get("metadata") or {}).get("resourceVersion")
        if expected and expected != old["metadata"]["resourceVersion"]:  # a precondition, as on a real server
            raise Conflict(f"{key} was modified (resourceVersion {old['metadata']['resourceVersion']})")
        new = merge_patch(old, patch)
        new["metadata"]["resourceVersion"] = str(next(self._rv))
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        self.objects[key] = new
        self.writes.append(("patch", kind, name))
        return copy.deepcopy(new)

    def delete(self, api_version, kind, namespace, name):
        self.writes.append(("delete", kind, name))
        return self.objects.pop(self._key(api_version, kind, namespace, name), None) is not None

    # Test conveniences.
    def add(self, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        obj["metadata"].setdefault("namespace", "default")
        return self.create(obj)

    def kinds(self, namespace: str = "default") -> list[tuple[str, str]]:
        return sorted((k, n) for (_, k, ns, n) in self.objects if ns == namespace)
