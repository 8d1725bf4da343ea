"""What every builder needs to know about the ThemisCluster it builds for."""

from __future__ import annotations

from dataclasses import dataclass

from .. import API_VERSION, names
from ..spec import ThemisClusterSpec


@dataclass(frozen=True)
class ClusterContext:
    name: str
    namespace: str
    uid: str
    spec: ThemisClusterSpec

    @classmethod
    def from_body(cls, body: dict) -> ClusterContext:
        meta = body["metadata"]
        return cls(
            name=meta["name"],
            namespace=meta.get("namespace") or "default",
            uid=meta.get("uid", ""),
            spec=ThemisClusterSpec.model_validate(body.get("spec") or {}),
        )

    def owner_reference(self) -> dict:
        return {
            "apiVersion": API_VERSION,
            "kind": "ThemisCluster",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def metadata(self, name: str, component: str, **extra: dict) -> dict:
        """Child metadata: labels for selection, ownerReferences for garbage collection."""
        return {
            "name": name,
            "namespace": self.namespace,
            "labels": names.labels(self.name, component),
            "ownerReferences": [self.owner_reference()],
            **extra,
        }
