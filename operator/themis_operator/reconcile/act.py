"""Act: apply a decision's actions through the Kubernetes API, in order, and say what happened.

What happened may differ from what was decided: a child created meanwhile (e.g. by a restarted
operator) turns a create into a convergence of the existing object. An error stops the
reconcile where it is; the next one converges from there (kopf retries the handler).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..builders.children import all_child_refs
from ..kube import Conflict, Kube, KubeError
from .decide import Action, Create, Delete, Patch, change
from .volumes import Resize, resize_patch

Verb = Literal["created", "updated", "unchanged", "removed", "resized", "refused"]
#: What the API server answers a resize it will not do (e.g. a StorageClass without expansion).
_REFUSED = (400, 403, 422)


@dataclass(frozen=True)
class Done:
    kind: str
    name: str
    verb: Verb
    #: Why the API server refused it ("refused" only).
    message: str = ""


def _create(kube: Kube, obj: dict) -> Verb:
    try:
        kube.create(obj)
        return "created"
    except Conflict:  # created concurrently: converge what is there instead
        meta = obj["metadata"]
        existing = kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) or {}
        again = change(obj, existing)
        if again is None:
            return "unchanged"
        return _patch(kube, again.obj, again.patch)


def _patch(kube: Kube, obj: dict, patch: dict) -> Verb:
    meta = obj["metadata"]
    kube.patch(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"], patch)
    return "updated"


def act(kube: Kube, namespace: str, actions: Sequence[Action]) -> tuple[Done, ...]:
    done: list[Done] = []
    for action in actions:
        match action:
            case Create(obj=obj):
                done.append(Done(obj["kind"], obj["metadata"]["name"], _create(kube, obj)))
            case Patch(obj=obj, patch=patch):
                done.append(Done(obj["kind"], obj["metadata"]["name"], _patch(kube, obj, patch)))
            case Delete(ref=ref):
                kube.delete(ref.api_version, ref.kind, namespace, ref.name)
                done.append(Done(ref.kind, ref.name, "removed"))
            case Resize():
                done.append(_resize(kube, namespace, action))
    return tuple(done)


def _resize(kube: Kube, namespace: str, r: Resize) -> Done:
    try:
        kube.patch("v1", "PersistentVolumeClaim", namespace, r.claim, resize_patch(r.size))
    except KubeError as e:
        if e.status not in _REFUSED:
            raise
        why = f"{r.field} {r.size}: PersistentVolumeClaim {r.claim} cannot grow ({e})"
        return Done("PersistentVolumeClaim", r.claim, "refused", why[:500])
    return Done("PersistentVolumeClaim", r.claim, "resized")


def delete_children(kube: Kube, namespace: str, cluster: str) -> list[str]:
    """Remove every child explicitly (garbage collection may be absent or slow)."""
    removed = []
    for ref in all_child_refs(cluster):
        if kube.get(ref.api_version, ref.kind, namespace, ref.name) is not None:
            kube.delete(ref.api_version, ref.kind, namespace, ref.name)
            removed.append(f"{ref.kind}/{ref.name}")
    return removed
