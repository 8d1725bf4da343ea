"""A trained adapter outlives its shard process: after a restart over the same data and weights
directories it is loaded again (same file, same domain); one unloaded through the API stays
unloaded."""

from __future__ import annotations

import httpx
import pytest
from themis_shard.domains.sets import training_texts

from .conftest import Server, llm_settings

pytestmark = [pytest.mark.llm, pytest.mark.slow]


def shard(data) -> Server:
    from themis_shard.app import create_app
    from themis_shard.settings import Settings

    return Server(create_app(Settings(data_dir=data, llm=llm_settings())))


def train(c: httpx.Client, name: str) -> dict:
    body = {
        "name": name,
        "domain": "legal",
        "collection": "legal",
        "steps": 1,
        "batch": 2,
        "max_tokens": 16,
        "evaluate": False,
    }
    r = c.post("/v1/adapters:train", json=body)
    assert r.status_code == 201, r.text
    return r.json()["adapter"]


def test_trained_adapters_are_reloaded_after_a_restart_unless_unloaded(tmp_path):
    with shard(tmp_path) as srv, httpx.Client(base_url=srv.url, timeout=1800) as c:
        assert c.put("/v1/collections/legal", json={}).status_code == 200
        for i, text in enumerate(training_texts("legal")[:4]):
            assert c.put(f"/v1/collections/legal/documents/d{i}", json={"text": text}).status_code == 200
        kept = train(c, "legal-kept")
        train(c, "legal-dropped")
        assert c.delete("/v1/adapters/legal-dropped").status_code == 200
    srv._thread.join(timeout=600)  # the store is closed (its lock released) once the app has stopped
    assert not srv._thread.is_alive()

    with shard(tmp_path) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        adapters = {a["name"]: a for a in c.get("/v1/adapters").json()["adapters"]}
        assert set(adapters) == {"legal-kept"}
        again = adapters["legal-kept"]
        assert (again["domain"], again["sha256"], again["path"]) == ("legal", kept["sha256"], kept["path"])
        r = c.post("/v1/infer", json={"prompt": "The lessee shall", "adapter": "legal-kept", "max_tokens": 2})
        assert r.status_code == 200, r.text
