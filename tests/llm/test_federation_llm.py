"""POST /v1/adapters/{name}:federate on a real shard with the model: bad requests are refused by
name before any training starts; a one-shard federation is a round of one participant."""

from __future__ import annotations

import httpx
import pytest
from themis_shard.domains.sets import training_texts

pytestmark = [pytest.mark.llm, pytest.mark.slow]


@pytest.fixture(scope="module")
def http(make_server):
    srv = make_server()
    with httpx.Client(base_url=srv.url, timeout=1800) as c:
        assert c.put("/v1/collections/legal", json={}).status_code == 200
        for i, text in enumerate(training_texts("legal")[:4]):
            assert c.put(f"/v1/collections/legal/documents/d{i}", json={"text": text}).status_code == 200
        yield c


@pytest.mark.parametrize(
    "path, patch, status, code",
    [
        ("legal-fed", {"epochs": 3}, 400, "unsupported_parameter"),
        ("legal-fed", {"rounds": 0}, 400, "invalid_request"),
        ("legal-fed", {"participants": ["shard-9"]}, 400, "unknown_shard"),
        ("Bad..Name", {}, 400, "invalid_adapter_name"),
        ("legal-fed", {"collection": "nope"}, 404, "collection_not_found"),
    ],
)
def test_bad_federate_requests_are_refused_by_name(http, path, patch, status, code):
    body = {"domain": "legal", "collection": "nope", "rounds": 1, "local_steps": 1, **patch}
    r = http.post(f"/v1/adapters/{path}:federate", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code


def test_a_lone_shard_federates_with_itself_and_loads_round_one(http):
    body = {
        "domain": "legal",
        "collection": "legal",
        "rounds": 1,
        "local_steps": 1,
        "batch": 2,
        "max_tokens": 16,
    }
    r = http.post("/v1/adapters/legal-solo:federate", json=body)
    assert r.status_code == 200, r.text
    (rnd,) = r.json()["rounds"]
    assert rnd["round"] == 1 and rnd["training_samples"] == 4
    assert [u["shard_id"] for u in rnd["updates"]] == [p["shard_id"] for p in rnd["published"]]
    adapter = http.get("/v1/adapters/legal-solo").json()
    assert adapter["domain"] == "legal" and adapter["evaluation"]["validation_set"] == "adapter"
    # a second call continues from round 1
    r = http.post("/v1/adapters/legal-solo:federate", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["rounds"][0]["round"] == 2
