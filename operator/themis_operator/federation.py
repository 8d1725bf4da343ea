"""Federated rounds a LoRAAdapter asks for (``spec.federated``), started on the cluster's shard 0.

The operator does not train: it asks shard 0 (the aggregator) for ``POST
/v1/adapters/{name}:federate``, which runs the rounds over the shards holding the collection's
documents, and writes the outcome to ``status.federation``. ``due``, ``request_body`` and
``status_of`` are pure; ``Federator.start`` is the one HTTP call. A spec generation is federated
once: a failed run is retried only by a new generation (or by deleting ``status.federation``).
"""

from __future__ import annotations

import ssl

import httpx

from .spec import LoRAAdapterSpec


def due(spec: LoRAAdapterSpec, status: dict | None, generation: int | None) -> bool:
    """Federated rounds are wanted and this generation of the spec has not had them yet."""
    if spec.federated is None:
        return False
    done = ((status or {}).get("federation") or {}).get("observedGeneration")
    return done is None or done != generation


def request_body(spec: LoRAAdapterSpec) -> dict:
    f = spec.federated
    assert f is not None
    return {
        "domain": spec.domain,
        "collection": f.collection,
        "text_field": f.text_field,
        "rounds": f.rounds,
        "local_steps": f.local_steps,
        "rank": min(spec.rank, 64),
    }


def status_of(status_code: int, answer: dict, generation: int | None) -> dict:
    """``status.federation`` from the aggregator's answer: the last round, its sample count and
    the accuracy delta each participant measured on the domain's held-out set."""
    if status_code != 200 or not answer.get("rounds"):
        err = answer.get("error") or {}
        return {
            "phase": "Failed",
            "observedGeneration": generation,
            "message": f"{status_code} {err.get('code', '')}: {err.get('message', '')}".strip(),
        }
    last = answer["rounds"][-1]
    deltas = [p["accuracy_delta"] for p in last["published"] if p.get("accuracy_delta") is not None]
    return {
        "phase": "Succeeded",
        "observedGeneration": generation,
        "round": last["round"],
        "trainingSamples": last["training_samples"],
        "participants": sorted(u["shard_id"] for u in last["updates"] if u["samples"] > 0),
        **({"accuracyDelta": min(deltas)} if deltas else {}),
        "message": f"round {last['round']} published to {len(last['published'])} shard(s)",
    }


class Federator:
    """The HTTP call (``timeout_s``: rounds of CPU training take minutes)."""

    def __init__(self, timeout_s: float = 3600.0) -> None:
        self.timeout_s = timeout_s

    def start(
        self, url: str, name: str, body: dict, ca_pem: bytes | None, api_key: str | None
    ) -> tuple[int, dict]:
        verify: ssl.SSLContext | bool = True
        if url.startswith("https") and ca_pem:
            verify = ssl.create_default_context(cadata=ca_pem.decode())
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        try:
            r = httpx.post(
                f"{url}/v1/adapters/{name}:federate",
                json=body,
                timeout=self.timeout_s,
                verify=verify,
                headers=headers,
            )
        except httpx.HTTPError as exc:
            return 0, {"error": {"code": "unreachable", "message": str(exc) or type(exc).__name__}}
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, {"error": {"code": "bad_response", "message": r.text[:200]}}
