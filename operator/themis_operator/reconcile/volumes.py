"""``spec.storage.dataSize`` / ``weightsSize`` after creation: grow the claims, or say why not.

A StatefulSet's volumeClaimTemplates cannot change, so a new size reaches the shards by patching
each existing PersistentVolumeClaim's request: Kubernetes expands the volume where its
StorageClass has ``allowVolumeExpansion`` and the API server refuses the patch otherwise. The
operator reports that refusal, and a smaller size (volumes never shrink), as a Degraded condition
naming the field, instead of silently keeping the old size. Claims created later by a scale-out
start at the template's (creation-time) size and are grown by the next reconcile.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .. import names
from ..spec import StorageSpec

_QUANTITY = re.compile(r"^(?P<n>[0-9]+(?:\.[0-9]+)?)(?P<unit>[EPTGMK]i?|[kMGTPE])?$")
_FACTORS = {
    None: 1,
    **{f"{u}i": 1024 ** (i + 1) for i, u in enumerate("KMGTPE")},
    **{u: 1000 ** (i + 1) for i, u in enumerate(["k", "M", "G", "T", "P", "E"])},
    "K": 1000,
}
#: volumeClaimTemplate name → the spec field that sizes it.
FIELDS = {"data": ("dataSize", "data_size"), "weights": ("weightsSize", "weights_size")}


def quantity_bytes(quantity: str) -> int:
    """A Kubernetes storage quantity ("20Gi", "500M", "1000") in bytes."""
    m = _QUANTITY.match(quantity.strip())
    if m is None:
        raise ValueError(f"not a storage quantity: {quantity!r}")
    return int(float(m["n"]) * _FACTORS[m["unit"]])


@dataclass(frozen=True)
class Resize:
    """Grow one claim's request to ``size`` (the spec's ``field``)."""

    claim: str
    size: str
    field: str


def plan_resizes(
    cluster: str, storage: StorageSpec, claims: Sequence[dict]
) -> tuple[list[Resize], list[str]]:
    """``(claims to grow, refusals)`` for the cluster's shard claims (``<template>-<cluster>-<i>``)."""
    resizes: list[Resize] = []
    refusals: list[str] = []
    sts = names.statefulset(cluster)
    for claim in sorted(claims, key=lambda c: c["metadata"]["name"]):
        name = claim["metadata"]["name"]
        template = name.split("-", 1)[0]
        if template not in FIELDS or not name.startswith(f"{template}-{sts}-"):
            continue
        camel, attr = FIELDS[template]
        wanted = getattr(storage, attr)
        current = ((claim.get("spec") or {}).get("resources") or {}).get("requests", {}).get("storage")
        if not current:
            continue
        if quantity_bytes(wanted) > quantity_bytes(current):
            resizes.append(Resize(name, wanted, f"spec.storage.{camel}"))
        elif quantity_bytes(wanted) < quantity_bytes(current):
            refusals.append(
                f"spec.storage.{camel} {wanted} is smaller than PersistentVolumeClaim {name}'s "
                f"{current}: volumes cannot shrink, the claim keeps {current}"
            )
    return resizes, refusals


def resize_patch(size: str) -> dict:
    return {"spec": {"resources": {"requests": {"storage": size}}}}
