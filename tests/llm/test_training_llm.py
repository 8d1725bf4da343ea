"""LoRA training on a shard's own documents: POST /v1/adapters:train writes a LoRA GGUF that
llama.cpp loads, and a (short) run on the legal documents lowers the held-out legal loss."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from themis_shard.domains.sets import training_texts, validation_set

pytestmark = [pytest.mark.llm, pytest.mark.slow]


@pytest.fixture(scope="module")
def http(make_server):
    srv = make_server()
    with httpx.Client(base_url=srv.url, timeout=1800) as c:
        assert c.put("/v1/collections/legal", json={}).status_code == 200
        for i, text in enumerate(training_texts("legal")):
            assert c.put(f"/v1/collections/legal/documents/d{i}", json={"text": text}).status_code == 200
        assert c.put("/v1/collections/legal/documents/untexted", json={"title": "no text"}).status_code == 200
        yield c


def test_train_writes_loads_and_announces_what_it_was_trained_on(http):
    body = {
        "name": "legal-ft",
        "domain": "legal",
        "collection": "legal",
        "steps": 1,
        "batch": 2,
        "evaluate": False,
    }
    r = http.post("/v1/adapters:train", json=body)
    assert r.status_code == 201, r.text
    out = r.json()
    assert out["training_samples"] == len(training_texts("legal"))  # the untexted document is not one
    assert out["steps"] == 1 and out["adapter"]["name"] == "legal-ft" and out["adapter"]["domain"] == "legal"
    from themis_shard.llm.model import read_gguf_metadata

    meta = read_gguf_metadata(Path(out["path"]))
    assert meta["general.type"] == "adapter" and meta["themis.training_samples"] == out["training_samples"]
    assert meta["themis.validation"].count("\n") + 1 == len(validation_set("legal"))
    # llama.cpp serves it
    r = http.post("/v1/infer", json={"prompt": "The lessee shall", "adapter": "legal-ft", "max_tokens": 2})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "patch, status, code",
    [
        ({"collection": "nope"}, 404, "collection_not_found"),
        ({"text_field": "missing"}, 400, "no_training_data"),
        ({"epochs": 3}, 400, "unsupported_parameter"),  # an unknown field is refused by name
        ({"steps": 0}, 400, "invalid_request"),
    ],
)
def test_bad_training_requests_are_clear_4xx(http, patch, status, code):
    body = {"name": "x", "domain": "legal", "collection": "legal", "steps": 1, **patch}
    r = http.post("/v1/adapters:train", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
