"""A request that names no domain gets the one the detector finds, when some shard can use it.

The detected domain becomes the request's routing hint only where it changes something: on a lone
shard (its engine picks the domain's adapter if it has one), or in a cluster where the router has
a shard whose announced adapter for that domain clears a threshold. Otherwise the request runs
here as before — a detected domain with no adapter anywhere would only add a hop to the ring
owner. The answer says what was detected (``domain_detected``), ``general`` included.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cluster.routing.inference import InferenceRouting
from ..domains.detect import GENERAL
from ..domains.detector import DomainDetector
from .local import InferRequest


@dataclass(frozen=True)
class DomainHint:
    request: InferRequest
    #: what the detector found (None: the request named a domain or an adapter, or detection is off)
    detected: str | None = None

    def annotate(self, answer):
        """``domain_detected`` in a JSON answer (a stream is relayed unchanged)."""
        if self.detected is not None and isinstance(answer, dict):
            answer["domain_detected"] = self.detected
        return answer


def routable(routing: InferenceRouting, domain: str) -> bool:
    return not routing.clustered or bool(routing.router.table(domain).entries)


async def hint_domain(
    detector: DomainDetector | None, routing: InferenceRouting, req: InferRequest
) -> DomainHint:
    if detector is None or req.domain or req.adapter:
        return DomainHint(req)
    found = await detector.detect(req.prompt)
    if found is None:
        return DomainHint(req)
    if found.domain != GENERAL and routable(routing, found.domain):
        return DomainHint(req.model_copy(update={"domain": found.domain}), found.domain)
    return DomainHint(req, found.domain)
