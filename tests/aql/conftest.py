"""A seeded single shard for AQL specs: users, orders (for joins) and 3-d vectors, plus a fake
inference gateway that records what AQL asked of /v1/infer, /v1/infer:batch and /v1/embed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from themis_shard.app import create_app
from themis_shard.llm.settings import LLMSettings
from themis_shard.settings import Settings

USERS = [
    {"_key": "alice", "name": "Alice", "age": 34, "city": "Berlin", "tags": ["admin", "dev"]},
    {"_key": "bob", "name": "Bob", "age": 27, "city": "Paris", "tags": ["dev"]},
    {"_key": "carol", "name": "Carol", "age": 41, "city": "Berlin", "tags": []},
    {"_key": "dave", "name": "Dave", "age": 19, "city": "Rome", "tags": ["ops"]},
    {"_key": "erin", "name": "Erin", "age": 27, "city": "Paris"},
]
ORDERS = [
    {"_key": "o1", "user": "alice", "total": 30},
    {"_key": "o2", "user": "alice", "total": 12.5},
    {"_key": "o3", "user": "bob", "total": 99},
    {"_key": "o4", "user": "dave", "total": 5},
]
#: 3-d unit-ish vectors; "near-x" documents point along x.
PASSAGES = [
    {"_key": "p1", "topic": "law", "year": 2020, "text": "contracts and torts", "embedding": [1.0, 0.0, 0.0]},
    {"_key": "p2", "topic": "law", "year": 2023, "text": "criminal procedure", "embedding": [0.9, 0.1, 0.0]},
    {"_key": "p3", "topic": "med", "year": 2021, "text": "cardiology basics", "embedding": [0.0, 1.0, 0.0]},
    {"_key": "p4", "topic": "med", "year": 2024, "text": "oncology trials", "embedding": [0.1, 0.9, 0.1]},
    {"_key": "p5", "topic": "tax", "year": 2022, "text": "income tax rules", "embedding": [0.0, 0.0, 1.0]},
    {"_key": "p6", "topic": "law", "year": 2019, "text": "property law", "embedding": [0.7, 0.0, 0.7]},
]


class FakeGateway:
    """Stands in for the shard's inference API; echoes what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def infer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("infer", body))
        shard = {"legal": "shard-legal"}.get(body.get("domain") or "", "shard-0")
        return {
            "text": f"echo:{body['prompt'][-12:]}",
            "tokens": 1,
            "shard_id": shard,
            "model": body.get("model"),
        }

    async def infer_batch(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.calls.append(("infer_batch", bodies))
        return [
            {"text": f"echo:{b['prompt']}", "shard_id": "shard-0", "domain": b.get("domain")} for b in bodies
        ]

    async def embed(self, texts: list[str], model: str | None = None) -> list[list[float]]:
        self.calls.append(("embed", texts))
        # "law" questions land near the x axis, everything else near y.
        return [[1.0, 0.05, 0.0] if "law" in t or "contract" in t else [0.0, 1.0, 0.0] for t in texts]


def seed(client: TestClient) -> None:
    assert client.put("/v1/collections/passages", json={"dimension": 3}).status_code == 200
    for coll, docs in (("users", USERS), ("orders", ORDERS), ("passages", PASSAGES)):
        items = [{"key": d["_key"], "document": {k: v for k, v in d.items() if k != "_key"}} for d in docs]
        assert (
            client.post(f"/v1/collections/{coll}/documents:batch", json={"documents": items}).status_code
            == 200
        )


@pytest.fixture
def gateway() -> FakeGateway:
    return FakeGateway()


@contextmanager
def seeded_shard(data_dir: Path, gateway: FakeGateway) -> Iterator[TestClient]:
    settings = Settings(data_dir=data_dir, llm=LLMSettings(enabled=False))
    with TestClient(create_app(settings)) as client:
        seed(client)
        client.app.state.node.aql.gateway = gateway
        yield client


@pytest.fixture
def aql(tmp_path: Path, gateway) -> Iterator[TestClient]:
    """A freshly seeded shard per test (for tests that write or change limits)."""
    with seeded_shard(tmp_path / "shard", gateway) as client:
        yield client


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Iterator[TestClient]:
    """One seeded shard per module, for read-only query tables."""
    with seeded_shard(tmp_path_factory.mktemp("aql") / "shard", FakeGateway()) as client:
        yield client


def run(client: TestClient, query: str, **bind_vars: Any) -> Any:
    """The result of a query that must succeed."""
    response = client.post("/v1/aql", json={"query": query, "bind_vars": bind_vars})
    assert response.status_code == 200, response.text
    return response.json()["result"]


def fail(client: TestClient, query: str, **bind_vars: Any) -> dict:
    """The error of a query that must be refused with a 4xx."""
    response = client.post("/v1/aql", json={"query": query, "bind_vars": bind_vars})
    assert 400 <= response.status_code < 500, response.text
    return {"status": response.status_code, **response.json()["error"]}
