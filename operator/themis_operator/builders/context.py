"""What every builder needs to know about the ThemisCluster it builds for."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import API_VERSION, names
from ..images import default_shard_image
from ..spec import ThemisClusterSpec


@dataclass(frozen=True)
class ClusterContext:
    name: str
    namespace: str
    uid: str
    spec: ThemisClusterSpec
    #: The image of a spec that pins none (the operator's settings, else its own version).
    default_image: str = field(default_factory=default_shard_image)

    @classmethod
    def from_body(cls, body: dict, default_image: str | None = None) -> ClusterContext:
        meta = body["metadata"]
        return cls(
            name=meta["name"],
            namespace=meta.get("namespace") or "default",
            uid=meta.get("uid", ""),
            spec=ThemisClusterSpec.model_validate(body.get("spec") or {}),
            **({"default_image": default_image} if default_image else {}),
        )

    @property
    def image(self) -> str:
        """The shard image: the spec's pin, else the operator's default."""
        return self.spec.image or self.default_image

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
