"""Writing a reconcile Outcome back: own status via kopf's patch, events, adapter statuses."""

from __future__ import annotations

import logging

import kopf

from .. import API_VERSION
from ..kube import Kube
from ..reconcile import Outcome

log = logging.getLogger(__name__)


def emit(body: dict, outcome: Outcome) -> None:
    for event in outcome.events:
        if event.type == "Warning":
            kopf.warn(body, reason=event.reason, message=event.message)
        else:
            kopf.info(body, reason=event.reason, message=event.message)


def write_adapter_statuses(kube: Kube, namespace: str, outcome: Outcome) -> None:
    for name, status in outcome.adapter_statuses.items():
        try:
            kube.patch(API_VERSION, "LoRAAdapter", namespace, name, {"status": status}, subresource="status")
        except Exception as e:  # an adapter deleted meanwhile must not fail the cluster's reconcile
            log.warning("could not update LoRAAdapter %s status: %s", name, e)
